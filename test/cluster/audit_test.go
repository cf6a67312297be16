//go:build e2e

package cluster_test

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rota-sched/rota/test/cluster"
)

// TestServiceAccountIdentityAndAudit: a minted ServiceAccount kubeconfig is
// authorized only by RBAC bindings to that ServiceAccount, and the audit
// log records its requests (with their response codes) and nobody else's.
func TestServiceAccountIdentityAndAudit(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{NoScheduler: true, NoPodSimulator: true, AuditLog: true})
	ctx := t.Context()
	clientFor := func(path string) kubernetes.Interface {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	saPath, err := c.ServiceAccountKubeconfig("default", "probe")
	if err != nil {
		t.Fatal(err)
	}
	plainPath, err := c.UserKubeconfig("plain-user")
	if err != nil {
		t.Fatal(err)
	}
	sa, plain := clientFor(saPath), clientFor(plainPath)

	if _, err := sa.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing pods without a binding: %v, want 403", err)
	}
	if _, err := plain.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("plain user listing pods: %v, want 403", err)
	}
	if _, err := c.Client().RbacV1().Roles("default").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "probe"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "probe", Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := sa.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listing pods with the RoleBinding: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	f, err := os.Open(c.AuditLogFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	codes := map[string]map[int]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Verb string `json:"verb"`
			User struct {
				Username string   `json:"username"`
				Groups   []string `json:"groups"`
			} `json:"user"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if codes[ev.User.Username] == nil {
			codes[ev.User.Username] = map[int]bool{}
		}
		if ev.Verb == "list" {
			codes[ev.User.Username][ev.ResponseStatus.Code] = true
		}
	}
	user := cluster.ServiceAccountUser("default", "probe")
	if !codes[user][403] || !codes[user][200] {
		t.Errorf("audit log has list codes %v for %s, want 403 and 200", codes[user], user)
	}
	for u := range codes {
		if u != user {
			t.Errorf("audit log records %s; the default policy records service accounts only", u)
		}
	}
	files, err := c.AuditLogFiles()
	if err != nil || len(files) != 1 || files[0] != c.AuditLogFile {
		t.Errorf("AuditLogFiles() = %v, %v", files, err)
	}
}
