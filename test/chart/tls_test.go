//go:build e2e

package chart

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/rota-sched/rota/extender/server"
	"github.com/rota-sched/rota/test/cluster"
)

// rendered is what the TLS tests read from one rendering of the chart.
type rendered struct {
	objs         []*unstructured.Unstructured
	extenderArgs []string
	extender     map[string]any // the scheduler configuration's extender entry
}

func renderTLS(t *testing.T, sets []string) rendered {
	t.Helper()
	r := rendered{objs: decode(t, render(t, sets))}
	for _, o := range r.objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "rota-extender":
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, a := range cs[0].(map[string]any)["args"].([]any) {
				r.extenderArgs = append(r.extenderArgs, a.(string))
			}
		case o.GetKind() == "ConfigMap" && o.GetName() == "rota-scheduler":
			data, _, _ := unstructured.NestedString(o.Object, "data", "config.yaml")
			var cfg struct {
				Extenders []map[string]any `json:"extenders"`
			}
			if err := yaml.Unmarshal([]byte(data), &cfg); err != nil || len(cfg.Extenders) != 1 {
				t.Fatalf("scheduler configuration %q: %v", data, err)
			}
			r.extender = cfg.Extenders[0]
		}
	}
	if r.extenderArgs == nil || r.extender == nil {
		t.Fatalf("%v: no extender Deployment or scheduler configuration rendered", sets)
	}
	return r
}

func (r rendered) find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// secretFiles writes a rendered kubernetes.io/tls Secret's keys into dir.
func secretFiles(t *testing.T, s *unstructured.Unstructured, dir string) map[string]string {
	t.Helper()
	data, _, _ := unstructured.NestedStringMap(s.Object, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{}
	for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
		b, err := base64.StdEncoding.DecodeString(data[k])
		if err != nil || len(b) == 0 {
			t.Fatalf("Secret %s: key %s missing or not base64: %v", s.GetName(), k, err)
		}
		paths[k] = filepath.Join(dir, k)
		if err := os.WriteFile(paths[k], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

// volumeSecret returns the Secret a Deployment mounts at path.
func volumeSecret(t *testing.T, d *unstructured.Unstructured, path string) string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	for _, m := range cs[0].(map[string]any)["volumeMounts"].([]any) {
		if m.(map[string]any)["mountPath"] != path {
			continue
		}
		for _, v := range vols {
			if v.(map[string]any)["name"] == m.(map[string]any)["name"] {
				name, _, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName")
				return name
			}
		}
	}
	return ""
}

// TestChartVerbsNeedClientCertificates: by default the chart runs
// rota-extender with its serving certificate and a client CA, and the
// chart's kube-scheduler with enableHTTPS and a client certificate. The
// rendered certificates are then served by rota-extender's own TLS code:
// the scheduler's certificate passes, a client without one is refused.
func TestChartVerbsNeedClientCertificates(t *testing.T) {
	r := renderTLS(t, nil)
	for _, want := range []string{"--listen=:8888", "--ops-listen=:8889", "--tls-cert-file=/etc/rota/tls/tls.crt",
		"--tls-key-file=/etc/rota/tls/tls.key", "--client-ca-file=/etc/rota/tls/ca.crt"} {
		if !slices.Contains(r.extenderArgs, want) {
			t.Errorf("extender args %v lack %s", r.extenderArgs, want)
		}
	}
	if slices.Contains(r.extenderArgs, "--allow-unauthenticated-verbs") {
		t.Error("the default chart allows unauthenticated verbs")
	}
	e := r.extender
	tc, _ := e["tlsConfig"].(map[string]any)
	if e["urlPrefix"] != "https://rota-extender.rota-system.svc:8888" || e["enableHTTPS"] != true || tc == nil ||
		tc["certFile"] != "/etc/rota/tls/tls.crt" || tc["keyFile"] != "/etc/rota/tls/tls.key" || tc["caFile"] != "/etc/rota/tls/ca.crt" {
		t.Errorf("scheduler's extender entry = %v", e)
	}
	if got := volumeSecret(t, r.find("Deployment", "rota-extender"), "/etc/rota/tls"); got != "rota-extender-tls" {
		t.Errorf("extender mounts %q at /etc/rota/tls, want rota-extender-tls", got)
	}
	if got := volumeSecret(t, r.find("Deployment", "rota-scheduler"), "/etc/rota/tls"); got != "rota-scheduler-tls" {
		t.Errorf("scheduler mounts %q at /etc/rota/tls, want rota-scheduler-tls", got)
	}

	serving, client := r.find("Secret", "rota-extender-tls"), r.find("Secret", "rota-scheduler-tls")
	if serving == nil || client == nil {
		t.Fatal("the chart renders no rota-extender-tls or rota-scheduler-tls Secret")
	}
	dir := t.TempDir()
	sf := secretFiles(t, serving, filepath.Join(dir, "serving"))
	cf := secretFiles(t, client, filepath.Join(dir, "client"))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.New(nil, server.Options{}).Run(ctx, server.HTTP{Listen: "127.0.0.1:0", OpsListen: "127.0.0.1:0",
			ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, ShutdownTimeout: time.Second,
			TLS: server.TLS{CertFile: sf["tls.crt"], KeyFile: sf["tls.key"], ClientCAFile: sf["ca.crt"]}}, ready)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var addr string
	select {
	case a := <-ready:
		addr = a.String()
	case err := <-done:
		t.Fatalf("rota-extender's TLS refuses the chart's certificates: %v", err)
	}
	// The scheduler dials the Service name; its caFile must verify the
	// serving certificate for that name.
	caPEM, _ := os.ReadFile(cf["ca.crt"])
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	dial := func(withCert bool) error {
		cfg := &tls.Config{RootCAs: roots, ServerName: "rota-extender.rota-system.svc", MinVersion: tls.VersionTLS12}
		if withCert {
			pair, err := tls.LoadX509KeyPair(cf["tls.crt"], cf["tls.key"])
			if err != nil {
				t.Fatal(err)
			}
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := c.Get("https://" + addr + "/filter")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed { // GET on a POST route: the request got through TLS
			t.Errorf("GET /filter with the scheduler's certificate = %s", resp.Status)
		}
		return nil
	}
	if err := dial(true); err != nil {
		t.Errorf("the scheduler's certificate and caFile against the extender: %v", err)
	}
	if err := dial(false); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without a certificate: %v, want refused in the handshake", err)
	}
	block, _ := pem.Decode(mustRead(t, cf["tls.crt"]))
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("the scheduler's certificate is not for client auth: %v %v", leaf.ExtKeyUsage, err)
	}

	// cert-manager: the chart's CA chain and two Certificates, no keys in the chart.
	cm := renderTLS(t, []string{"extender.tls.certManager.enabled=true"})
	if cm.find("Secret", "rota-extender-tls") != nil || cm.find("Secret", "rota-scheduler-tls") != nil {
		t.Error("with cert-manager the chart still renders certificate Secrets")
	}
	for name, want := range map[string]string{"rota-extender": "rota-extender-tls", "rota-scheduler": "rota-scheduler-tls"} {
		c := cm.find("Certificate", name)
		if c == nil {
			t.Errorf("no Certificate %s", name)
			continue
		}
		secret, _, _ := unstructured.NestedString(c.Object, "spec", "secretName")
		issuer, _, _ := unstructured.NestedString(c.Object, "spec", "issuerRef", "name")
		if secret != want || issuer != "rota-extender-ca" {
			t.Errorf("Certificate %s: secretName %q issuer %q, want %s from rota-extender-ca", name, secret, issuer, want)
		}
	}
	if cm.find("Issuer", "rota-extender-ca") == nil || cm.find("Certificate", "rota-extender-ca") == nil {
		t.Error("with cert-manager and no issuerRef the chart has no CA of its own")
	}
	// admission.certManager.enabled alone (what make manifests renders) also switches the extender.
	if m := renderTLS(t, manifestSets); m.find("Certificate", "rota-scheduler") == nil || m.find("Secret", "rota-scheduler-tls") != nil {
		t.Error("admission.certManager.enabled=true does not make cert-manager issue the extender's certificates")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestChartInsecureHTTP: plain HTTP only when extender.insecureHTTP asks
// for it, and then the install notes warn.
func TestChartInsecureHTTP(t *testing.T) {
	r := renderTLS(t, []string{"extender.insecureHTTP=true"})
	if !slices.Contains(r.extenderArgs, "--allow-unauthenticated-verbs") {
		t.Errorf("insecure extender args %v lack --allow-unauthenticated-verbs", r.extenderArgs)
	}
	for _, a := range r.extenderArgs {
		if strings.HasPrefix(a, "--tls-") || strings.HasPrefix(a, "--client-ca-file") {
			t.Errorf("insecure extender still has %s", a)
		}
	}
	if r.extender["urlPrefix"] != "http://rota-extender.rota-system.svc:8888" || r.extender["enableHTTPS"] != false ||
		r.extender["tlsConfig"] != nil {
		t.Errorf("insecure scheduler's extender entry = %v", r.extender)
	}
	if r.find("Secret", "rota-extender-tls") != nil || volumeSecret(t, r.find("Deployment", "rota-scheduler"), "/etc/rota/tls") != "" {
		t.Error("insecure chart still renders or mounts the extender's certificates")
	}
	notes := func(sets ...string) string {
		return renderNotes(t, sets)
	}
	if n := notes("extender.insecureHTTP=true"); !strings.Contains(n, "WARNING: extender.insecureHTTP is true") ||
		!strings.Contains(n, "can bind any pending pod") {
		t.Errorf("NOTES with insecureHTTP do not warn:\n%s", n)
	}
	if n := notes(); strings.Contains(n, "WARNING") {
		t.Errorf("NOTES warn with the default values:\n%s", n)
	}
}

// renderNotes renders the chart's NOTES.txt with sets: helm template leaves
// NOTES out and helm install needs a cluster, so a copy of the chart gets a
// template that renders the notes into a ConfigMap.
func renderNotes(t *testing.T, sets []string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rota")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(repoRoot(t), "charts", "rota"))); err != nil {
		t.Fatal(err)
	}
	notes := mustRead(t, filepath.Join(dir, "templates", "NOTES.txt"))
	if err := os.WriteFile(filepath.Join(dir, "notes-test.txt"), notes, 0o600); err != nil {
		t.Fatal(err)
	}
	tmpl := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes-test}\ndata:\n  notes: {{ tpl (.Files.Get \"notes-test.txt\") . | toJson }}\n"
	if err := os.WriteFile(filepath.Join(dir, "templates", "zz-notes-test.yaml"), []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "rota", dir, "--namespace", "rota-system", "--kube-version", "1.37.2",
		"--show-only", "templates/zz-notes-test.yaml"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	objs := decode(t, helm(t, args...))
	if len(objs) != 1 {
		t.Fatalf("notes rendered as %d objects", len(objs))
	}
	n, _, _ := unstructured.NestedString(objs[0].Object, "data", "notes")
	if !strings.Contains(n, "Rota") {
		t.Fatalf("rendered notes: %q", n)
	}
	return n
}

// TestChartNetworkPolicy: the verbs port only from the chart's scheduler
// pods; the ops port from anywhere unless opsFrom says otherwise.
func TestChartNetworkPolicy(t *testing.T) {
	np := renderTLS(t, nil).find("NetworkPolicy", "rota-extender")
	if np == nil {
		t.Fatal("no NetworkPolicy rota-extender")
	}
	rules, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
	if len(rules) != 2 {
		t.Fatalf("ingress rules = %v", rules)
	}
	verbs := rules[0].(map[string]any)
	from, _ := verbs["from"].([]any)
	if port, _, _ := unstructured.NestedSlice(verbs, "ports"); len(port) != 1 || port[0].(map[string]any)["port"] != "verbs" ||
		len(from) != 1 {
		t.Fatalf("verbs rule = %v", verbs)
	}
	sel, _, _ := unstructured.NestedStringMap(from[0].(map[string]any), "podSelector", "matchLabels")
	if sel["app.kubernetes.io/component"] != "scheduler" || sel["app.kubernetes.io/instance"] != "rota" {
		t.Errorf("verbs allowed from %v, want the chart's scheduler pods", sel)
	}
	if _, ok := rules[1].(map[string]any)["from"]; ok {
		t.Errorf("ops rule %v limits sources without opsFrom", rules[1])
	}
	// The scheduler pods carry the labels the policy matches.
	d := renderTLS(t, nil).find("Deployment", "rota-scheduler")
	labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
	for k, v := range sel {
		if labels[k] != v {
			t.Errorf("scheduler pod labels %v do not match the NetworkPolicy's %v", labels, sel)
		}
	}
}

// TestChartCertificatesKeptOnUpgrade installs the chart on a real API
// server and upgrades it: the generated certificates (the extender's, the
// scheduler's, the webhook's) stay the same, and so does the scheduler's
// certificate checksum (no restart). With the client Secret deleted, the
// upgrade generates a new CA for both sides and the checksum changes.
func TestChartCertificatesKeptOnUpgrade(t *testing.T) {
	c := cluster.StartT(t, cluster.Options{NoScheduler: true, NoPodSimulator: true, NodeLeaseInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := []string{"--kubeconfig", c.Kubeconfig, "--namespace", "rota-system"}
	helm(t, append([]string{"install", "rota", "charts/rota", "--create-namespace"}, kube...)...)
	secrets := func() map[string]map[string][]byte {
		out := map[string]map[string][]byte{}
		for _, name := range []string{"rota-extender-tls", "rota-scheduler-tls", "rota-admission-tls"} {
			s, err := c.Client().CoreV1().Secrets("rota-system").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("after helm install: %v", err)
			}
			out[name] = s.Data
		}
		return out
	}
	checksum := func() string {
		d, err := c.Client().AppsV1().Deployments("rota-system").Get(ctx, "rota-scheduler", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d.Spec.Template.Annotations["checksum/tls"]
	}
	before, sumBefore := secrets(), checksum()
	if !bytes.Equal(before["rota-extender-tls"]["ca.crt"], before["rota-scheduler-tls"]["ca.crt"]) {
		t.Fatal("the extender's and the scheduler's certificates do not share a CA")
	}
	helm(t, append([]string{"upgrade", "rota", "charts/rota"}, kube...)...)
	after := secrets()
	for name, data := range before {
		for k, v := range data {
			if !bytes.Equal(after[name][k], v) {
				t.Errorf("helm upgrade changed %s %s", name, k)
			}
		}
	}
	if got := checksum(); got != sumBefore || got == "" {
		t.Errorf("scheduler checksum/tls %q -> %q across an upgrade that kept the certificates", sumBefore, got)
	}

	// Rotation: delete one Secret, upgrade: a new CA for both sides.
	if err := c.Client().CoreV1().Secrets("rota-system").Delete(ctx, "rota-scheduler-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	helm(t, append([]string{"upgrade", "rota", "charts/rota"}, kube...)...)
	rotated := secrets()
	if bytes.Equal(rotated["rota-extender-tls"]["ca.crt"], before["rota-extender-tls"]["ca.crt"]) ||
		!bytes.Equal(rotated["rota-extender-tls"]["ca.crt"], rotated["rota-scheduler-tls"]["ca.crt"]) {
		t.Error("after deleting rota-scheduler-tls, helm upgrade did not issue a new CA for both sides")
	}
	if checksum() == sumBefore {
		t.Error("the scheduler's checksum/tls did not change with its CA (its pod would keep the old caFile)")
	}
}
