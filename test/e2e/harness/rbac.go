package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/rota-sched/rota/test/cluster"
)

// The ServiceAccounts of Rota's chart (release "rota" in SystemNamespace, as
// deploy/rota.yaml renders it) that the harness runs Rota's processes as.
const (
	ExtenderServiceAccount     = "rota-extender"
	AdmissionServiceAccount    = "rota-admission"
	DevicePluginServiceAccount = "rota-device-plugin"
)

// ManifestsFile is the chart's rendering (make manifests), relative to the
// repository root. test/chart checks that it equals what the chart renders.
const ManifestsFile = "deploy/rota.yaml"

// ChartRBAC is the RBAC part of Rota's manifests: ServiceAccounts, Roles,
// ClusterRoles and their bindings.
type ChartRBAC struct {
	ServiceAccounts     []corev1.ServiceAccount
	ClusterRoles        []rbacv1.ClusterRole
	ClusterRoleBindings []rbacv1.ClusterRoleBinding
	Roles               []rbacv1.Role
	RoleBindings        []rbacv1.RoleBinding
}

// LoadChartRBAC reads the RBAC objects from a multi-document YAML file
// such as deploy/rota.yaml; other kinds are skipped.
func LoadChartRBAC(path string) (*ChartRBAC, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := ParseChartRBAC(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ParseChartRBAC is LoadChartRBAC on the file's content.
func ParseChartRBAC(data []byte) (*ChartRBAC, error) {
	r := &ChartRBAC{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		var target any
		switch u.GetKind() {
		case "ServiceAccount":
			r.ServiceAccounts = append(r.ServiceAccounts, corev1.ServiceAccount{})
			target = &r.ServiceAccounts[len(r.ServiceAccounts)-1]
		case "ClusterRole":
			r.ClusterRoles = append(r.ClusterRoles, rbacv1.ClusterRole{})
			target = &r.ClusterRoles[len(r.ClusterRoles)-1]
		case "ClusterRoleBinding":
			r.ClusterRoleBindings = append(r.ClusterRoleBindings, rbacv1.ClusterRoleBinding{})
			target = &r.ClusterRoleBindings[len(r.ClusterRoleBindings)-1]
		case "Role":
			r.Roles = append(r.Roles, rbacv1.Role{})
			target = &r.Roles[len(r.Roles)-1]
		case "RoleBinding":
			r.RoleBindings = append(r.RoleBindings, rbacv1.RoleBinding{})
			target = &r.RoleBindings[len(r.RoleBindings)-1]
		default:
			continue
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, target); err != nil {
			return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return r, nil
}

// HasServiceAccount reports whether the manifests define namespace/name.
func (r *ChartRBAC) HasServiceAccount(namespace, name string) bool {
	return slices.ContainsFunc(r.ServiceAccounts, func(sa corev1.ServiceAccount) bool {
		return sa.Namespace == namespace && sa.Name == name
	})
}

// Apply creates the objects (an object that exists already is replaced),
// then waits until the API server's RBAC authorizer has seen every binding:
// a process started before that would see 403s its grants do not explain.
func (r *ChartRBAC) Apply(ctx context.Context, client kubernetes.Interface) error {
	create := func(what string, do func() error) error {
		// kube-system is created by the API server shortly after it is ready.
		for {
			err := do()
			if err == nil || apierrors.IsAlreadyExists(err) {
				return nil
			}
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("creating %s: %w", what, err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("creating %s: %w", what, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	var errs []error
	for _, o := range r.ServiceAccounts {
		errs = append(errs, create("ServiceAccount "+o.Namespace+"/"+o.Name, func() error {
			_, err := client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, clean(&o), metav1.CreateOptions{})
			return err
		}))
	}
	for _, o := range r.ClusterRoles {
		errs = append(errs, create("ClusterRole "+o.Name, func() error {
			_, err := client.RbacV1().ClusterRoles().Create(ctx, clean(&o), metav1.CreateOptions{})
			return err
		}))
	}
	for _, o := range r.Roles {
		errs = append(errs, create("Role "+o.Namespace+"/"+o.Name, func() error {
			_, err := client.RbacV1().Roles(o.Namespace).Create(ctx, clean(&o), metav1.CreateOptions{})
			return err
		}))
	}
	for _, o := range r.ClusterRoleBindings {
		errs = append(errs, create("ClusterRoleBinding "+o.Name, func() error {
			_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, clean(&o), metav1.CreateOptions{})
			return err
		}))
	}
	for _, o := range r.RoleBindings {
		errs = append(errs, create("RoleBinding "+o.Namespace+"/"+o.Name, func() error {
			_, err := client.RbacV1().RoleBindings(o.Namespace).Create(ctx, clean(&o), metav1.CreateOptions{})
			return err
		}))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return r.waitEffective(ctx, client)
}

// clean drops what the API server refuses on create.
func clean[T metav1.Object](o T) T {
	o.SetResourceVersion("")
	o.SetUID("")
	return o
}

// waitEffective asks the API server (SubjectAccessReview) for one grant of
// every binding until each is allowed.
func (r *ChartRBAC) waitEffective(ctx context.Context, client kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, sa := range r.ServiceAccounts {
		seen := map[string]bool{}
		for _, g := range r.Grants(sa.Namespace, sa.Name) {
			if seen[g.Binding] || g.External {
				continue
			}
			seen[g.Binding] = true
			ns := g.Namespace // "" with a ClusterRoleBinding: all namespaces
			res, sub, _ := strings.Cut(g.Resource, "/")
			name := ""
			if len(g.ResourceNames) > 0 {
				name = g.ResourceNames[0]
			}
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   cluster.ServiceAccountUser(sa.Namespace, sa.Name),
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + sa.Namespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: g.Verb,
					Group: g.APIGroup, Resource: res, Subresource: sub, Name: name},
			}}
			for {
				got, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
				if err == nil && got.Status.Allowed {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("%s: binding %s not in effect (%s): %w %v", sa.Name, g.Binding, g, err, got)
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// Grant is one verb on one resource that a binding gives a subject.
type Grant struct {
	// Binding is "ClusterRoleBinding/<name>" or "RoleBinding/<ns>/<name>";
	// Role is "ClusterRole/<name>" or "Role/<ns>/<name>".
	Binding, Role string
	// Namespace is where the grant holds; empty for cluster-wide.
	Namespace string
	APIGroup  string
	// Resource is resource or resource/subresource, as in a PolicyRule.
	Resource      string
	Verb          string
	ResourceNames []string
	// External: the role is not in the manifests (a built-in such as
	// system:kube-scheduler), so its rules are unknown here.
	External bool
}

func (g Grant) String() string {
	s := Permission{APIGroup: g.APIGroup, Resource: g.Resource, Verb: g.Verb}.String()
	if len(g.ResourceNames) > 0 {
		s += "[" + strings.Join(g.ResourceNames, ",") + "]"
	}
	if g.Namespace != "" {
		s += " in " + g.Namespace
	}
	return s
}

// Permission is an API group, a resource (with /subresource) and a verb.
type Permission struct{ APIGroup, Resource, Verb string }

func (p Permission) String() string {
	g := p.APIGroup
	if g == "" {
		g = "core"
	}
	return g + " " + p.Resource + " " + p.Verb
}

// Grants lists, one verb and resource a line, what the manifests' bindings
// give ServiceAccount namespace/name. Bindings to roles the manifests do
// not define come back as one External grant each.
func (r *ChartRBAC) Grants(namespace, name string) []Grant {
	isSubject := func(subjects []rbacv1.Subject, bindingNS string) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			ns := s.Namespace
			if ns == "" {
				ns = bindingNS
			}
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == name && ns == namespace
		})
	}
	var out []Grant
	expand := func(binding, role, ns string, rules []rbacv1.PolicyRule, found bool) {
		if !found {
			out = append(out, Grant{Binding: binding, Role: role, Namespace: ns, External: true})
			return
		}
		for _, rule := range rules {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						out = append(out, Grant{Binding: binding, Role: role, Namespace: ns, APIGroup: g,
							Resource: res, Verb: v, ResourceNames: rule.ResourceNames})
					}
				}
			}
		}
	}
	clusterRole := func(n string) ([]rbacv1.PolicyRule, bool) {
		i := slices.IndexFunc(r.ClusterRoles, func(cr rbacv1.ClusterRole) bool { return cr.Name == n })
		if i < 0 {
			return nil, false
		}
		return r.ClusterRoles[i].Rules, true
	}
	for _, b := range r.ClusterRoleBindings {
		if isSubject(b.Subjects, "") {
			rules, ok := clusterRole(b.RoleRef.Name)
			expand("ClusterRoleBinding/"+b.Name, "ClusterRole/"+b.RoleRef.Name, "", rules, ok)
		}
	}
	for _, b := range r.RoleBindings {
		if !isSubject(b.Subjects, b.Namespace) {
			continue
		}
		if b.RoleRef.Kind == "ClusterRole" {
			rules, ok := clusterRole(b.RoleRef.Name)
			expand("RoleBinding/"+b.Namespace+"/"+b.Name, "ClusterRole/"+b.RoleRef.Name, b.Namespace, rules, ok)
			continue
		}
		i := slices.IndexFunc(r.Roles, func(ro rbacv1.Role) bool { return ro.Namespace == b.Namespace && ro.Name == b.RoleRef.Name })
		var rules []rbacv1.PolicyRule
		if i >= 0 {
			rules = r.Roles[i].Rules
		}
		expand("RoleBinding/"+b.Namespace+"/"+b.Name, "Role/"+b.Namespace+"/"+b.RoleRef.Name, b.Namespace, rules, i >= 0)
	}
	return out
}

// AuditRequest is one request from the API server's audit log.
type AuditRequest struct {
	AuditID, Stage, User, Verb, UserAgent string
	// Resource requests: APIGroup, Resource ("pods/binding" for a
	// subresource), Namespace, Name. NonResource requests: RequestURI.
	APIGroup, Resource, Namespace, Name string
	NonResource                         bool
	RequestURI                          string
	// Code is the response's status code (0 when the stage has none).
	Code int
	// Received is when the API server received the request.
	Received time.Time
}

// Permission returns the request's group, resource and verb.
func (a AuditRequest) Permission() Permission {
	return Permission{APIGroup: a.APIGroup, Resource: a.Resource, Verb: a.Verb}
}

// auditEvent is the part of an audit.k8s.io/v1 Event that is read here.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	UserAgent string    `json:"userAgent"`
	Received  time.Time `json:"requestReceivedTimestamp"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// ReadAuditLog parses JSON-lines audit logs (Options.AuditLog of
// test/cluster) into one AuditRequest per request: the last stage logged
// for each audit ID (ResponseComplete, or ResponseStarted for a watch still
// open; Panic too).
func ReadAuditLog(paths ...string) ([]AuditRequest, error) {
	var out []AuditRequest
	index := map[string]int{}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		line := 0
		for sc.Scan() {
			line++
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var ev auditEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s:%d: %w", path, line, err)
			}
			a := AuditRequest{AuditID: ev.AuditID, Stage: ev.Stage, User: ev.User.Username, Verb: ev.Verb,
				UserAgent: ev.UserAgent, RequestURI: ev.RequestURI, NonResource: ev.ObjectRef == nil, Received: ev.Received}
			if o := ev.ObjectRef; o != nil {
				a.APIGroup, a.Resource, a.Namespace, a.Name = o.APIGroup, o.Resource, o.Namespace, o.Name
				if o.Subresource != "" {
					a.Resource += "/" + o.Subresource
				}
			}
			if ev.ResponseStatus != nil {
				a.Code = ev.ResponseStatus.Code
			}
			if i, ok := index[a.AuditID]; ok && a.AuditID != "" {
				if a.Code == 0 {
					a.Code = out[i].Code
				}
				out[i] = a
				continue
			}
			index[a.AuditID] = len(out)
			out = append(out, a)
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return out, nil
}

// Covers reports whether grant g authorizes request a (same rules as the
// RBAC authorizer: "*" matches any group, resource or verb; "*/sub" any
// resource's subresource sub; resourceNames restrict to those names).
func (g Grant) Covers(a AuditRequest) bool {
	if g.External || a.NonResource {
		return false
	}
	if g.Namespace != "" && g.Namespace != a.Namespace {
		return false
	}
	if g.APIGroup != rbacv1.APIGroupAll && g.APIGroup != a.APIGroup {
		return false
	}
	if g.Verb != rbacv1.VerbAll && g.Verb != a.Verb {
		return false
	}
	if g.Resource != rbacv1.ResourceAll && g.Resource != a.Resource {
		_, sub, hasSub := strings.Cut(a.Resource, "/")
		if !hasSub || g.Resource != "*/"+sub {
			return false
		}
	}
	return len(g.ResourceNames) == 0 || slices.Contains(g.ResourceNames, a.Name)
}

// PermissionUse is one row of a ServiceAccount's used-vs-granted table.
type PermissionUse struct {
	Permission
	// Grants are the manifests' grants of this permission (several when
	// they differ in namespace or resource names).
	Grants []Grant
	// Requests counts the audited requests; Forbidden those answered 403
	// that Usage's transient does not excuse, Transient those it does.
	Requests, Forbidden, Transient int
	// Namespaces are where the requests went ("" for cluster-scoped or all).
	Namespaces []string
	// Uncovered counts allowed requests no grant of the manifests covers:
	// the API server's built-in policy allowed them.
	Uncovered int
}

// Used reports whether a request was allowed for this permission.
func (u PermissionUse) Used() bool { return u.Requests > u.Forbidden+u.Transient }

// UsageReport is one ServiceAccount's use of the API against its grants.
type UsageReport struct {
	User string
	// Rows, sorted by group, resource, verb.
	Rows []PermissionUse
	// External lists bindings to roles the manifests do not define.
	External []Grant
	// NonResource counts non-resource requests (discovery: /api, /apis...),
	// which the built-in system:discovery role allows every user.
	NonResource map[string]int
}

// Usage compares the requests of user in reqs with grants. A 403 for which
// transient (when not nil) returns true counts as Transient, not Forbidden.
func Usage(user string, grants []Grant, reqs []AuditRequest, transient func(AuditRequest) bool) UsageReport {
	rep := UsageReport{User: user, NonResource: map[string]int{}}
	rows := map[Permission]*PermissionUse{}
	row := func(p Permission) *PermissionUse {
		if rows[p] == nil {
			rows[p] = &PermissionUse{Permission: p}
		}
		return rows[p]
	}
	for _, g := range grants {
		if g.External {
			rep.External = append(rep.External, g)
			continue
		}
		r := row(Permission{APIGroup: g.APIGroup, Resource: g.Resource, Verb: g.Verb})
		r.Grants = append(r.Grants, g)
	}
	for _, a := range reqs {
		if a.User != user {
			continue
		}
		if a.NonResource {
			path, _, _ := strings.Cut(a.RequestURI, "?")
			rep.NonResource[a.Verb+" "+path]++
			continue
		}
		r := row(a.Permission())
		r.Requests++
		if a.Code == 403 {
			if transient != nil && transient(a) {
				r.Transient++
			} else {
				r.Forbidden++
			}
			continue
		}
		if !slices.Contains(r.Namespaces, a.Namespace) {
			r.Namespaces = append(r.Namespaces, a.Namespace)
		}
		// The row's own grants may not cover it (other namespace or names);
		// a wildcard grant on another row may.
		if !slices.ContainsFunc(grants, func(g Grant) bool { return g.Covers(a) }) {
			r.Uncovered++
		}
	}
	for _, r := range rows {
		sort.Strings(r.Namespaces)
		rep.Rows = append(rep.Rows, *r)
	}
	sort.Slice(rep.Rows, func(i, j int) bool {
		a, b := rep.Rows[i].Permission, rep.Rows[j].Permission
		if a.APIGroup != b.APIGroup {
			return a.APIGroup < b.APIGroup
		}
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		return a.Verb < b.Verb
	})
	return rep
}

// UnusedGrants returns the grants no allowed request of the report's user
// used. A wildcard grant counts as used when anything it covers was used.
func UnusedGrants(grants []Grant, reqs []AuditRequest, user string) []Grant {
	var out []Grant
	for _, g := range grants {
		if g.External {
			continue
		}
		if !slices.ContainsFunc(reqs, func(a AuditRequest) bool {
			return a.User == user && a.Code != 403 && g.Covers(a)
		}) {
			out = append(out, g)
		}
	}
	return out
}
