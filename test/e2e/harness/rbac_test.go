package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const testManifests = `# a comment-only document
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: rota-extender, namespace: rota-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored, namespace: rota-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: rota-extender}
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, watch]
  - apiGroups: [""]
    resources: [pods/binding]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: rota-extender}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: rota-extender}
subjects: [{kind: ServiceAccount, name: rota-extender, namespace: rota-system}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: leader, namespace: rota-system}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [rota]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: leader, namespace: rota-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: leader}
subjects: [{kind: ServiceAccount, name: rota-extender}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: auth-reader, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{kind: ServiceAccount, name: rota-extender, namespace: rota-system}]
`

// Audit lines as kube-apiserver writes them (trimmed to the read fields).
const testAudit = `{"kind":"Event","auditID":"a1","stage":"ResponseStarted","requestURI":"/api/v1/pods?watch=true","verb":"watch","user":{"username":"system:serviceaccount:rota-system:rota-extender"},"objectRef":{"resource":"pods","apiVersion":"v1"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-01-01T00:00:00.000000Z"}
{"kind":"Event","auditID":"a2","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/ns/pods/p/binding","verb":"create","user":{"username":"system:serviceaccount:rota-system:rota-extender"},"objectRef":{"resource":"pods","namespace":"ns","name":"p","apiVersion":"v1","subresource":"binding"},"responseStatus":{"code":201},"requestReceivedTimestamp":"2026-01-01T00:00:01.000000Z"}
{"kind":"Event","auditID":"a3","stage":"ResponseComplete","requestURI":"/api/v1/nodes","verb":"list","user":{"username":"system:serviceaccount:rota-system:rota-extender"},"objectRef":{"resource":"nodes","apiVersion":"v1"},"responseStatus":{"code":403},"requestReceivedTimestamp":"2026-01-01T00:00:02.000000Z"}
{"kind":"Event","auditID":"a4","stage":"ResponseComplete","requestURI":"/apis","verb":"get","user":{"username":"system:serviceaccount:rota-system:rota-extender"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-01-01T00:00:03.000000Z"}
{"kind":"Event","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/pods?watch=true","verb":"watch","user":{"username":"system:serviceaccount:rota-system:rota-extender"},"objectRef":{"resource":"pods","apiVersion":"v1"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-01-01T00:00:00.000000Z"}
{"kind":"Event","auditID":"b1","stage":"ResponseComplete","requestURI":"/api/v1/nodes","verb":"list","user":{"username":"system:serviceaccount:other:x"},"objectRef":{"resource":"nodes","apiVersion":"v1"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-01-01T00:00:04.000000Z"}
`

func TestChartRBACGrantsAndUsage(t *testing.T) {
	r, err := ParseChartRBAC([]byte(testManifests))
	if err != nil {
		t.Fatal(err)
	}
	if !r.HasServiceAccount("rota-system", "rota-extender") || len(r.ClusterRoles) != 1 || len(r.RoleBindings) != 2 {
		t.Fatalf("parsed %+v", r)
	}
	grants := r.Grants("rota-system", "rota-extender")
	var got []string
	for _, g := range grants {
		if g.External {
			got = append(got, "external "+g.Role)
			continue
		}
		got = append(got, g.String())
	}
	want := []string{"core pods get", "core pods watch", "core pods/binding create",
		"coordination.k8s.io leases get[rota] in rota-system",
		"external Role/kube-system/extension-apiserver-authentication-reader"}
	if !slices.Equal(got, want) {
		t.Fatalf("grants\n got %q\nwant %q", got, want)
	}

	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(testAudit), 0o600); err != nil {
		t.Fatal(err)
	}
	reqs, err := ReadAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 5 || reqs[0].Stage != "ResponseComplete" || reqs[1].Resource != "pods/binding" || !reqs[3].NonResource {
		t.Fatalf("audit requests %+v", reqs)
	}

	user := "system:serviceaccount:rota-system:rota-extender"
	rep := Usage(user, grants, reqs, nil)
	rows := map[string]PermissionUse{}
	for _, row := range rep.Rows {
		rows[row.Permission.String()] = row
	}
	if row := rows["core nodes list"]; row.Forbidden != 1 || len(row.Grants) != 0 {
		t.Errorf("nodes list: %+v, want one 403 and no grant", row)
	}
	if row := rows["core pods/binding create"]; !row.Used() || row.Uncovered != 0 || !slices.Equal(row.Namespaces, []string{"ns"}) {
		t.Errorf("pods/binding: %+v", row)
	}
	if rep.NonResource["get /apis"] != 1 || len(rep.External) != 1 {
		t.Errorf("non-resource %v, external %v", rep.NonResource, rep.External)
	}
	transient := Usage(user, grants, reqs, func(AuditRequest) bool { return true })
	if row := transient.Rows[0]; row.Permission.String() != "core nodes list" || row.Transient != 1 || row.Forbidden != 0 {
		t.Errorf("transient 403 not excused: %+v", row)
	}

	var unused []string
	for _, g := range UnusedGrants(grants, reqs, user) {
		unused = append(unused, g.String())
	}
	if want := []string{"core pods get", "coordination.k8s.io leases get[rota] in rota-system"}; !slices.Equal(unused, want) {
		t.Errorf("unused %q, want %q", unused, want)
	}
}

func TestGrantCovers(t *testing.T) {
	req := AuditRequest{APIGroup: "", Resource: "pods/status", Verb: "patch", Namespace: "a", Name: "p"}
	for _, c := range []struct {
		g    Grant
		want bool
	}{
		{Grant{Resource: "pods/status", Verb: "patch"}, true},
		{Grant{Resource: "pods", Verb: "patch"}, false},
		{Grant{Resource: "*/status", Verb: "*"}, true},
		{Grant{APIGroup: "*", Resource: "*", Verb: "patch", Namespace: "a"}, true},
		{Grant{Resource: "pods/status", Verb: "patch", Namespace: "b"}, false},
		{Grant{Resource: "pods/status", Verb: "patch", ResourceNames: []string{"q"}}, false},
		{Grant{Resource: "pods/status", Verb: "patch", ResourceNames: []string{"p"}}, true},
		{Grant{APIGroup: "apps", Resource: "pods/status", Verb: "patch"}, false},
	} {
		if got := c.g.Covers(req); got != c.want {
			t.Errorf("%+v covers %+v = %v, want %v", c.g, req, got, c.want)
		}
	}
}

// TestManifestsDefineRotaServiceAccounts keeps the harness's names in step
// with deploy/rota.yaml.
func TestManifestsDefineRotaServiceAccounts(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Skip(err)
	}
	r, err := LoadChartRBAC(filepath.Join(root, ManifestsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{ExtenderServiceAccount, AdmissionServiceAccount, DevicePluginServiceAccount} {
		if !r.HasServiceAccount(SystemNamespace, sa) {
			t.Errorf("%s defines no ServiceAccount %s/%s", ManifestsFile, SystemNamespace, sa)
		}
		if gs := r.Grants(SystemNamespace, sa); len(gs) == 0 || strings.Contains(gs[0].Role, "*") {
			t.Errorf("%s: grants %v", sa, gs)
		}
	}
}
