//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rota-sched/rota/extender/scheduling"
)

// chromiumBin is Debian's chromium; ROTA_CHROMIUM overrides it.
func chromiumBin() string {
	if p := os.Getenv("ROTA_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// TestUIStatusPage: the extender's status page, rendered by headless
// Chromium against the running cluster, shows the scenario's nodes and
// their GPUs with the pods on them, and the pod that cannot fit in the
// queue with the extender's reason. It also takes a screenshot (kept where
// ROTA_UI_SCREENSHOT names a file).
func TestUIStatusPage(t *testing.T) {
	const name = "ui"
	bin := chromiumBin()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("headless Chromium is needed for the status page test and %s is missing: run hack/chromium-deps.sh (or set ROTA_CHROMIUM)", bin)
	}
	ctx, ns := setup(t, name, "", 3*time.Minute)
	spec := h100
	spec.Count = 4
	nodes(ctx, t, name, "ui", 2, spec)

	// train (3 GPUs) and eval (2 GPUs) cannot share a node; two 60 GiB
	// shares then take two of the three idle GPUs, so no node keeps 2 idle
	// GPUs for big. kube-scheduler counts only whole GPUs and still sees 2
	// free on eval's node, so the extender is asked and refuses.
	for _, p := range []struct {
		name string
		gpus int
		mem  int64
	}{{"train", 3, 0}, {"eval", 2, 0}, {"infer-a", 0, 60}, {"infer-b", 0, 60}} {
		b := pod(ns, p.name, name)
		if p.gpus > 0 {
			b = b.GPUs(p.gpus)
		} else {
			b = b.Memory(p.mem)
		}
		create(ctx, t, b.Obj())
		waitPods(ctx, t, ns, p.name+" bound", func(ps []corev1.Pod) bool { return boundNamed(ps, p.name) })
	}
	create(ctx, t, pod(ns, "big", name).GPUs(2).Obj())
	reason := waitNoFit(ctx, t, ns, "big")
	t.Logf("big: %s", reason)

	dir := t.TempDir()
	dom := chromium(ctx, t, dir, "--dump-dom", env.ExtenderURL+"/ui")
	for _, want := range []string{
		`data-node="ui-0"`, `data-node="ui-1"`,
		`data-gpu="ui-0/0"`, `data-gpu="ui-0/3"`, `data-gpu="ui-1/0"`, `data-gpu="ui-1/3"`,
		ns + "/train: whole GPU", ns + "/eval: whole GPU", ns + "/infer-a: 60 GiB", ns + "/infer-b: 60 GiB",
		`data-pod="` + ns + `/big"`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("rendered page does not show %q", want)
		}
	}
	row := regexp.MustCompile(`(?s)<tr data-pod="` + regexp.QuoteMeta(ns) + `/big">.*?</tr>`).FindString(dom)
	for _, want := range []string{"2 whole GPUs", htmlText(reason)} {
		if !strings.Contains(row, want) {
			t.Errorf("queue row of big %q does not show %q", row, want)
		}
	}
	// Every GPU of the scenario has a cell coloured by its use.
	cells := regexp.MustCompile(`class="gpu (idle|shared|whole|reserved|unhealthy)" data-gpu="ui-[01]/\d"`).FindAllString(dom, -1)
	if len(cells) != 8 {
		t.Errorf("rendered page has %d GPU cells for nodes ui-0 and ui-1, want 8", len(cells))
	}
	if t.Failed() {
		t.Logf("rendered page:\n%s", dom)
	}

	shot := filepath.Join(dir, "ui.png")
	chromium(ctx, t, dir, "--screenshot="+shot, "--window-size=1280,1000", "--hide-scrollbars", env.ExtenderURL+"/ui")
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot at %s: %v", shot, err)
	}
	if keep := os.Getenv("ROTA_UI_SCREENSHOT"); keep != "" {
		data, err := os.ReadFile(shot)
		if err == nil {
			err = os.WriteFile(keep, data, 0o644)
		}
		if err != nil {
			t.Errorf("keeping the screenshot: %v", err)
		}
		t.Logf("screenshot kept at %s", keep)
	}
	note(name, "page rendered by %s", filepath.Base(bin))
}

// chromium runs headless Chromium on the page with args and returns its
// standard output.
func chromium(ctx context.Context, t *testing.T, dir string, args ...string) string {
	t.Helper()
	profile, err := os.MkdirTemp(dir, "profile-")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + profile, "--virtual-time-budget=5000"}
	cmd := exec.CommandContext(cctx, chromiumBin(), append(base, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	return string(out)
}

// waitNoFit waits until the extender's decision log holds a refused filter
// for the pod and returns its message.
func waitNoFit(ctx context.Context, t *testing.T, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	url := env.ExtenderURL + "/debug/pods/" + ns + "/" + name
	var last, msg string
	err := wait.PollUntilContextCancel(ctx, 300*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		if msg, err = lastFilter(ctx, url, "nofit"); err != nil {
			last = err.Error()
		}
		return err == nil && msg != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no refused filter in the extender's decision log: %v (last: %s)", ns, name, err, last)
	}
	return msg
}

// lastFilter returns the message of the latest filter decision with outcome
// in the extender's decision record at url.
func lastFilter(ctx context.Context, url, outcome string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var got struct {
		Decisions []scheduling.Decision `json:"decisions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return "", err
	}
	for i := len(got.Decisions) - 1; i >= 0; i-- {
		if d := got.Decisions[i]; d.Verb == "filter" && d.Outcome == outcome && d.Message != "" {
			return d.Message, nil
		}
	}
	return "", fmt.Errorf("no filter decision with outcome %q yet", outcome)
}

// boundNamed reports whether the pod called name is bound.
func boundNamed(pods []corev1.Pod, name string) bool {
	for _, p := range pods {
		if p.Name == name {
			return p.Spec.NodeName != ""
		}
	}
	return false
}

// htmlText is s as Chromium serialises it in a text node.
func htmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
