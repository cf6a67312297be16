package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	at "github.com/rota-sched/rota/admission/admissiontest"
)

// TestConcurrentAdmissions is DESIGN invariant 3 under load: 200 one-GPU
// pods of a team with quota 50 arrive at once over HTTP; exactly 50 are
// admitted, each admitted pod is then created in the API server (the fake
// clientset) while other admissions are still running. Deleting 10 makes
// room for exactly 10 more.
func TestConcurrentAdmissions(t *testing.T) {
	app, client := startApp(t, testConfig(), at.Namespace("team-a", "a"),
		quotaConfigMap("teams: {a: {gpus: 50}}\n"))
	srv := httptest.NewServer(app.Routes())
	defer srv.Close()

	admitted := burst(t, srv.URL, client, "first", 200)
	if len(admitted) != 50 {
		t.Fatalf("admitted %d of 200 pods, want exactly 50", len(admitted))
	}
	waitFor(t, "the informer to show the 50 pods", func() bool {
		pods, _ := app.View().Reservations()
		u, _, _ := app.View().Usage()
		return pods == 0 && u["a"].Total().GPUs == 50
	})
	if again := burst(t, srv.URL, client, "blocked", 20); len(again) != 0 {
		t.Fatalf("admitted %d pods over a full quota", len(again))
	}

	for _, name := range admitted[:10] {
		if err := client.CoreV1().Pods("team-a").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the informer to show the deletions", func() bool {
		u, _, _ := app.View().Usage()
		return u["a"].Total().GPUs == 40
	})
	if more := burst(t, srv.URL, client, "second", 20); len(more) != 10 {
		t.Fatalf("after deleting 10, admitted %d of 20, want exactly 10", len(more))
	}
}

// burst posts n one-GPU pods concurrently and creates each admitted one in
// client, as the API server would; it returns the admitted names.
func burst(t *testing.T, url string, client *fake.Clientset, prefix string, n int) []string {
	t.Helper()
	var (
		mu       sync.Mutex
		admitted []string
		failed   atomic.Int32
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := at.Pod("team-a", fmt.Sprintf("%s-%03d", prefix, i)).GPUs(1).Obj()
			<-start
			resp, err := http.Post(url+"/validate", "application/json", bytes.NewReader(at.Review(admissionv1.Create, pod, nil)))
			if err != nil {
				failed.Add(1)
				return
			}
			defer resp.Body.Close()
			var review admissionv1.AdmissionReview
			if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || review.Response == nil {
				failed.Add(1)
				return
			}
			if !review.Response.Allowed {
				return
			}
			if _, err := client.CoreV1().Pods("team-a").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
				failed.Add(1)
				return
			}
			mu.Lock()
			admitted = append(admitted, pod.Name)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d requests failed", f)
	}
	return admitted
}
