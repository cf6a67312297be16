//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestImages builds the images `make images` builds (hack/images, into a
// temporary folder), imports the archives into the real node's containerd
// with ctr and runs each program from its image through the kubelet and
// runc, as the images' non-root user (runAsNonRoot: the kubelet refuses an
// image whose user is root or not numeric) on a read-only root file system:
//   - rota-device-plugin with the NVML backend: the dynamic loader and the
//     glibc of the image start it, NVML's dlopen runs and finds no
//     libnvidia-ml.so.1 (this host has no driver): exit code 3, the code
//     for "no driver", and NVML's own ERROR_LIBRARY_NOT_FOUND in the log;
//   - rota-extender and rota-admission print their usage (exit 0);
//   - kube-scheduler --version, named as the chart's command names it
//     (through the image's PATH), reports the version of its tag.
func TestImages(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	out, tags := buildImages(ctx, t)
	e := StartT(t, Options{})
	for name := range tags {
		if err := e.ImportImages(ctx, filepath.Join(out, name+".tar")); err != nil {
			t.Fatal(err)
		}
	}
	const ns = "images"
	if err := e.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	kubeVersion := strings.TrimPrefix(tags["rota-kube-scheduler"], "rota-kube-scheduler:")
	cases := []struct {
		pod, archive string
		command      []string
		args         []string
		exitCode     int32
		logHas       []string
	}{
		{pod: "device-plugin", archive: "rota-device-plugin", args: []string{"--backend=nvml", "--node-name=" + e.NodeName},
			exitCode: 3, logHas: []string{"No NVIDIA driver on this node", "ERROR_LIBRARY_NOT_FOUND"}},
		{pod: "extender", archive: "rota-extender", args: []string{"--help"}, logHas: []string{"Usage of rota-extender"}},
		{pod: "admission", archive: "rota-admission", args: []string{"--help"}, logHas: []string{"Usage of rota-admission"}},
		{pod: "kube-scheduler", archive: "rota-kube-scheduler", command: []string{"kube-scheduler", "--version"},
			logHas: []string{"Kubernetes " + kubeVersion}},
	}
	nonRoot, readOnly, noEscalation := true, true, false
	grace := int64(1)
	for _, c := range cases {
		tag, ok := tags[c.archive]
		if !ok {
			t.Fatalf("hack/images wrote no %s (tags %v)", c.archive, tags)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: c.pod, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{corev1.LabelHostname: e.NodeName},
				HostNetwork:                   true,
				DNSPolicy:                     corev1.DNSDefault,
				TerminationGracePeriodSeconds: &grace,
				RestartPolicy:                 corev1.RestartPolicyNever,
				SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot},
				Containers: []corev1.Container{{
					Name: "main", Image: tag, ImagePullPolicy: corev1.PullNever, Command: c.command, Args: c.args,
					SecurityContext: &corev1.SecurityContext{
						ReadOnlyRootFilesystem: &readOnly, AllowPrivilegeEscalation: &noEscalation,
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					},
				}},
			},
		}
		if _, err := e.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cases {
		t.Run(c.pod, func(t *testing.T) {
			var term *corev1.ContainerStateTerminated
			err := waitUntil(ctx, 2*time.Minute, "pod "+c.pod+" to finish", nil, func() (bool, string) {
				p, err := e.Client.CoreV1().Pods(ns).Get(ctx, c.pod, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				for _, cs := range p.Status.ContainerStatuses {
					term = cs.State.Terminated
				}
				return term != nil, describePod(p)
			})
			if err != nil {
				t.Fatal(err)
			}
			if term.ExitCode != c.exitCode {
				t.Errorf("exit code %d (%s %s), want %d", term.ExitCode, term.Reason, term.Message, c.exitCode)
			}
			raw, err := e.Client.CoreV1().Pods(ns).GetLogs(c.pod, &corev1.PodLogOptions{Container: "main"}).Do(ctx).Raw()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.logHas {
				if !strings.Contains(string(raw), s) {
					t.Errorf("log lacks %q:\n%s", s, tail(string(raw), 20))
				}
			}
		})
	}
	if err := e.DeletePods(ctx, ns, "device-plugin", "extender", "admission", "kube-scheduler"); err != nil {
		t.Error(err)
	}
}

// buildImages builds the images `make images` builds (hack/images) into a
// temporary folder and returns it with each archive's tag by base name
// (rota-extender -> rota-extender:<version>).
func buildImages(ctx context.Context, t *testing.T) (dir string, tags map[string]string) {
	t.Helper()
	root, err := repoRootDir()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	began := time.Now()
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/images", "--out", out)
	cmd.Dir = root
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./hack/images: %v\n%s", err, b)
	}
	t.Logf("images built in %s:\n%s", time.Since(began).Round(time.Millisecond), b)
	tags = map[string]string{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 2 {
			tags[strings.TrimSuffix(filepath.Base(f[0]), ".tar")] = f[1]
		}
	}
	return out, tags
}

// repoRootDir is the module's root: go test runs in test/realnode.
func repoRootDir() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil ||
		!strings.HasPrefix(string(b), "module github.com/rota-sched/rota\n") {
		return "", fmt.Errorf("%s is not the root of github.com/rota-sched/rota (%w)", root, err)
	}
	return root, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
