package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Helpers for running a real operator (Kueue, JobSet) beside the control
// plane: its CRDs and webhook manifests come from its module in the Go
// module cache, its webhooks are served on 127.0.0.1 and registered by URL.

// ModuleDir is where the Go module cache holds module at version (its
// CRDs and webhook manifests), or an error naming the make target that
// fetches it.
func ModuleDir(module, version, target string) (string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(module)+"@"+version)
	if _, err := os.Stat(filepath.Join(dir, "config", "components", "crd", "bases")); err != nil {
		return "", fmt.Errorf("%s %s's source is not in the module cache (%w): run make %s", module, version, err, target)
	}
	return dir, nil
}

// ApplyCRDs applies the CustomResourceDefinitions in dir (server-side:
// some are too large for client-side apply's annotation; forced: a test
// may have served the API before with a CRD of its own) and waits until
// every CRD is established.
func (c *Cluster) ApplyCRDs(ctx context.Context, dir string) error {
	bin, err := BinDir()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(bin, "kubectl")
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("applying the CRDs in %s: %w: %s", dir, err, out)
	}
	// kubectl wait fails, rather than waits, on a CRD so new that it has
	// no conditions yet: ask again for a while.
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", c.Kubeconfig, "wait", "--for=condition=established",
			"--timeout=60s", "crd", "--all").CombinedOutput()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for the CRDs in %s: %w: %s", dir, err, out)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// WaitOK polls url until it answers 200 or p exits (two minutes at most).
func WaitOK(ctx context.Context, p *Process, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		resp, err := http.Get(url) //nolint:gosec,noctx // a loopback probe of the harness's own process
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("exited: %w", p.ExitError())
		case <-ctx.Done():
			return fmt.Errorf("not ready at %s: %w", url, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Retarget decides whether an operator's webhook is registered and points
// it at the process: it rewrites the client configuration (and may narrow
// the namespace and object selectors, as the operator's release patches
// them) and reports whether to keep the webhook.
type Retarget func(cc *admissionv1.WebhookClientConfig, namespaces, objects **metav1.LabelSelector) bool

// RegisterWebhooks registers the webhooks of an operator's manifests (a
// multi-document YAML of Mutating- and ValidatingWebhookConfigurations)
// that retarget keeps, as name-mutating and name-validating.
func (c *Cluster) RegisterWebhooks(ctx context.Context, manifests []byte, name string, retarget Retarget) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	client := c.Client().AdmissionregistrationV1()
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("%s's webhook manifests: %w", name, err)
		}
		js, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		switch doc["kind"] {
		case "MutatingWebhookConfiguration":
			var w admissionv1.MutatingWebhookConfiguration
			if err := yaml.Unmarshal(js, &w); err != nil {
				return err
			}
			var hooks []admissionv1.MutatingWebhook
			for _, h := range w.Webhooks {
				if retarget(&h.ClientConfig, &h.NamespaceSelector, &h.ObjectSelector) {
					hooks = append(hooks, h)
				}
			}
			w.ObjectMeta, w.Webhooks = metav1.ObjectMeta{Name: name + "-mutating"}, hooks
			if _, err := client.MutatingWebhookConfigurations().Create(ctx, &w, metav1.CreateOptions{}); err != nil {
				return err
			}
		case "ValidatingWebhookConfiguration":
			var w admissionv1.ValidatingWebhookConfiguration
			if err := yaml.Unmarshal(js, &w); err != nil {
				return err
			}
			var hooks []admissionv1.ValidatingWebhook
			for _, h := range w.Webhooks {
				if retarget(&h.ClientConfig, &h.NamespaceSelector, &h.ObjectSelector) {
					hooks = append(hooks, h)
				}
			}
			w.ObjectMeta, w.Webhooks = metav1.ObjectMeta{Name: name + "-validating"}, hooks
			if _, err := client.ValidatingWebhookConfigurations().Create(ctx, &w, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// StopOperator stops an operator's process and removes the webhooks
// RegisterWebhooks registered for it under name.
func (c *Cluster) StopOperator(p *Process, name string) error {
	var errs []error
	if p != nil {
		errs = append(errs, p.Stop(10*time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(append(errs, c.DeleteWebhooks(ctx, name))...)
}

// DeleteWebhooks removes what RegisterWebhooks registered under name
// (nothing answers them once the operator stops: with their failure policy
// the API server would refuse what they match).
func (c *Cluster) DeleteWebhooks(ctx context.Context, name string) error {
	reg := c.Client().AdmissionregistrationV1()
	var errs []error
	if err := reg.MutatingWebhookConfigurations().Delete(ctx, name+"-mutating", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := reg.ValidatingWebhookConfigurations().Delete(ctx, name+"-validating", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
