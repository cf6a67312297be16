package podreq

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

func annotated(kv ...string) *corev1.Pod {
	p := pod(ctr(names.GPU, "1"))
	p.Annotations = map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		p.Annotations[kv[i]] = kv[i+1]
	}
	return p
}

func TestGPUModels(t *testing.T) {
	key := names.GPUModelsAnnotation
	long := strings.Repeat("x", MaxGPUModelLen)
	many := make([]string, MaxGPUModels+1)
	for i := range many {
		many[i] = "m" + string(rune('A'+i%26)) + string(rune('a'+i/26))
	}
	tests := []struct {
		name    string
		give    *corev1.Pod
		want    []string
		wantErr string // substring; "" means no error
	}{
		{name: "no annotation: any model", give: pod(ctr(names.GPU, "1"))},
		{name: "blank: any model", give: annotated(key, "  ")},
		{name: "empty: any model", give: annotated(key, "")},
		{name: "one", give: annotated(key, "NVIDIA H100 80GB HBM3"), want: []string{"NVIDIA H100 80GB HBM3"}},
		{name: "trimmed, order kept", give: annotated(key, " NVIDIA H200 141GB HBM3e ,  NVIDIA H100 80GB HBM3"),
			want: []string{"NVIDIA H200 141GB HBM3e", "NVIDIA H100 80GB HBM3"}},
		{name: "duplicates dropped", give: annotated(key, "A, B,A ,B,C"), want: []string{"A", "B", "C"}},
		{name: "name at the length bound", give: annotated(key, long), want: []string{long}},
		{name: "exactly the most models", give: annotated(key, strings.Join(many[:MaxGPUModels], ",")), want: many[:MaxGPUModels]},
		{name: "empty entry", give: annotated(key, "A,,B"), wantErr: "empty model name at position 2"},
		{name: "trailing comma", give: annotated(key, "A,B,"), wantErr: "empty model name at position 3"},
		{name: "blank entry", give: annotated(key, "A, ,B"), wantErr: "empty model name at position 2"},
		{name: "name too long", give: annotated(key, "A,"+long+"y"), wantErr: "model name of 254 bytes at position 2"},
		{name: "too many models", give: annotated(key, strings.Join(many, ",")), wantErr: "lists 33 GPU models"},
		{name: "far too many entries", give: annotated(key, strings.Repeat("a,", 10000)), wantErr: "lists 10001 entries"},
		{name: "control character", give: annotated(key, "A\x00B"), wantErr: "control character"},
		{name: "newline inside a name", give: annotated(key, "NVIDIA\nH100"), wantErr: "control character"},
		{name: "not UTF-8", give: annotated(key, "A\xffB"), wantErr: "not valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GPUModels(tc.give, names)
			if tc.wantErr != "" {
				var fe *contract.FieldError
				if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), key) || fe.Fix == "" {
					t.Fatalf("GPUModels = %q, %v; want a FieldError naming %s saying %q with a fix", got, err, key, tc.wantErr)
				}
				if len(err.Error()) > 1000 {
					t.Errorf("error is %d bytes long", len(err.Error()))
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("GPUModels = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestMaxRuntime(t *testing.T) {
	key := names.MaxRuntimeAnnotation
	withADS := func(p *corev1.Pod, s int64) *corev1.Pod {
		p.Spec.ActiveDeadlineSeconds = &s
		return p
	}
	tests := []struct {
		name    string
		give    *corev1.Pod
		want    time.Duration
		wantOK  bool
		wantErr string
	}{
		{name: "neither", give: pod(ctr(names.GPU, "1"))},
		{name: "annotation", give: annotated(key, "90m"), want: 90 * time.Minute, wantOK: true},
		{name: "annotation trimmed", give: annotated(key, " 1h30m "), want: 90 * time.Minute, wantOK: true},
		{name: "one second", give: annotated(key, "1s"), want: time.Second, wantOK: true},
		{name: "the limit", give: annotated(key, "8760h"), want: MaxRuntimeLimit, wantOK: true},
		{name: "activeDeadlineSeconds", give: withADS(pod(ctr(names.GPU, "1")), 3600), want: time.Hour, wantOK: true},
		{name: "both: the annotation is shorter", give: withADS(annotated(key, "30m"), 3600), want: 30 * time.Minute, wantOK: true},
		{name: "both: the deadline is shorter", give: withADS(annotated(key, "2h"), 3600), want: time.Hour, wantOK: true},
		{name: "largest activeDeadlineSeconds", give: withADS(pod(ctr(names.GPU, "1")), math.MaxInt32), want: math.MaxInt32 * time.Second, wantOK: true},
		{name: "empty annotation", give: annotated(key, ""), wantErr: "is empty"},
		{name: "blank annotation", give: annotated(key, "  "), wantErr: "is empty"},
		{name: "days are not a Go duration", give: annotated(key, "2d"), wantErr: "is not a duration"},
		{name: "a bare number", give: annotated(key, "3600"), wantErr: "is not a duration"},
		{name: "zero", give: annotated(key, "0s"), wantErr: "is not positive"},
		{name: "negative", give: annotated(key, "-5m"), wantErr: "is not positive"},
		{name: "over a year", give: annotated(key, "8761h"), wantErr: "longer than a year"},
		{name: "overflowing", give: annotated(key, "9999999999h"), wantErr: "is not a duration"},
		{name: "fraction of a second", give: annotated(key, "1500ms"), wantErr: `whole seconds, e.g. "2s"`},
		{name: "too long to read", give: annotated(key, strings.Repeat("1", 100)+"s"), wantErr: "longer than 64 characters"},
		{name: "bad annotation beside a deadline", give: withADS(annotated(key, "soon"), 60), wantErr: "is not a duration"},
		{name: "activeDeadlineSeconds zero", give: withADS(pod(ctr(names.GPU, "1")), 0), wantErr: "spec.activeDeadlineSeconds"},
		{name: "activeDeadlineSeconds negative", give: withADS(pod(ctr(names.GPU, "1")), -1), wantErr: "out of range"},
		{name: "activeDeadlineSeconds over the API bound", give: withADS(pod(ctr(names.GPU, "1")), math.MaxInt32+1), wantErr: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := MaxRuntime(tc.give, names)
			if tc.wantErr != "" {
				var fe *contract.FieldError
				if !errors.As(err, &fe) || !strings.Contains(err.Error(), tc.wantErr) || fe.Fix == "" || got != 0 || ok {
					t.Fatalf("MaxRuntime = %v, %v, %v; want a FieldError saying %q with a fix", got, ok, err, tc.wantErr)
				}
				if fe.Field != "spec.activeDeadlineSeconds" && !strings.Contains(fe.Field, key) {
					t.Errorf("error names field %q, want the annotation", fe.Field)
				}
				return
			}
			if err != nil || got != tc.want || ok != tc.wantOK {
				t.Fatalf("MaxRuntime = %v, %v, %v; want %v, %v", got, ok, err, tc.want, tc.wantOK)
			}
		})
	}
}

// FuzzGPUModels: GPUModels never panics; an accepted list holds at most
// MaxGPUModels distinct, trimmed, non-empty names without control
// characters, each one of the annotation's comma-separated entries, in
// their first order; a refusal is a FieldError naming the annotation.
func FuzzGPUModels(f *testing.F) {
	for _, s := range []string{"", " ", "NVIDIA H100 80GB HBM3", "A,B", "A,,B", "A,B,", " a , a ", "\x00", "\xff", strings.Repeat("x,", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := GPUModels(annotated(names.GPUModelsAnnotation, s), names)
		if err != nil {
			var fe *contract.FieldError
			if !errors.As(err, &fe) || !strings.Contains(fe.Field, names.GPUModelsAnnotation) || fe.Problem == "" || fe.Fix == "" {
				t.Fatalf("error %v is not a FieldError naming the annotation with a problem and a fix", err)
			}
			return
		}
		if strings.TrimSpace(s) == "" {
			if got != nil {
				t.Fatalf("blank %q read as %q, want any model", s, got)
			}
			return
		}
		if len(got) == 0 || len(got) > MaxGPUModels {
			t.Fatalf("%q read as %d models", s, len(got))
		}
		var want []string
		seen := map[string]bool{}
		for e := range strings.SplitSeq(s, ",") {
			if m := strings.TrimSpace(e); !seen[m] {
				seen[m] = true
				want = append(want, m)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q read as %q, want %q", s, got, want)
		}
		for _, m := range got {
			if m == "" || m != strings.TrimSpace(m) || len(m) > MaxGPUModelLen || !utf8.ValidString(m) || strings.ContainsFunc(m, unicode.IsControl) {
				t.Fatalf("%q accepted with model %q", s, m)
			}
		}
	})
}

// FuzzMaxRuntime: MaxRuntime never panics; an accepted runtime is a
// positive whole number of seconds no longer than the annotation's limit
// (or the deadline), never longer than the pod's activeDeadlineSeconds.
func FuzzMaxRuntime(f *testing.F) {
	for _, s := range []string{"90m", "1s", "0", "-1h", "8760h", "8760h1s", "1.5s", "2d", " 1h ", "", "9223372036854775807ns"} {
		f.Add(s, int64(0))
		f.Add(s, int64(3600))
	}
	f.Add("", int64(-7))
	f.Fuzz(func(t *testing.T, s string, ads int64) {
		p := annotated(names.MaxRuntimeAnnotation, s)
		if ads != 0 {
			p.Spec.ActiveDeadlineSeconds = &ads
		}
		d, ok, err := MaxRuntime(p, names)
		if err != nil {
			var fe *contract.FieldError
			if !errors.As(err, &fe) || fe.Problem == "" || fe.Fix == "" || d != 0 || ok {
				t.Fatalf("MaxRuntime(%q, %d) = %v, %v, %v", s, ads, d, ok, err)
			}
			return
		}
		if !ok || d < time.Second || d%time.Second != 0 {
			t.Fatalf("MaxRuntime(%q, %d) = %v, %v", s, ads, d, ok)
		}
		if ads != 0 && d > time.Duration(ads)*time.Second {
			t.Fatalf("MaxRuntime(%q, %d) = %v, longer than the deadline", s, ads, d)
		}
		if d > MaxRuntimeLimit && (ads == 0 || d != time.Duration(ads)*time.Second) {
			t.Fatalf("MaxRuntime(%q, %d) = %v, over the limit", s, ads, d)
		}
	})
}

func TestDeadlineAndLatestStart(t *testing.T) {
	at := time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)
	p := annotated(names.DeadlineAnnotation, "2026-12-06T18:00:00Z")
	if d, ok, err := Deadline(p, names); err != nil || !ok || !d.Equal(at) {
		t.Fatalf("Deadline = %v, %v, %v", d, ok, err)
	}
	if ls := LatestStart(p, names); !ls.Equal(at) {
		t.Errorf("latest start without a runtime = %v, want the deadline", ls)
	}
	p.Annotations[names.MaxRuntimeAnnotation] = "90m"
	if ls := LatestStart(p, names); !ls.Equal(at.Add(-90 * time.Minute)) {
		t.Errorf("latest start with 90m = %v", ls)
	}
	for _, bad := range []string{"tomorrow", "2026-12-06 18:00", "", strings.Repeat("9", 100)} {
		if _, _, err := Deadline(annotated(names.DeadlineAnnotation, bad), names); err == nil {
			t.Errorf("deadline %q accepted", bad)
		}
		if ls := LatestStart(annotated(names.DeadlineAnnotation, bad), names); !ls.IsZero() {
			t.Errorf("latest start of deadline %q = %v", bad, ls)
		}
	}
	if _, ok, err := Deadline(pod(ctr(names.GPU, "1")), names); ok || err != nil {
		t.Errorf("no deadline: %v, %v", ok, err)
	}
}

func FuzzDeadline(f *testing.F) {
	for _, s := range []string{"2026-12-06T18:00:00Z", "2026-12-06T18:00:00+02:00", "", "soon", " 2026-12-06T18:00:00Z "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p := annotated(names.DeadlineAnnotation, s)
		d, ok, err := Deadline(p, names)
		if err != nil {
			var fe *contract.FieldError
			if !errors.As(err, &fe) || fe.Problem == "" || fe.Fix == "" || ok || !d.IsZero() || len(fe.Value) > maxRuntimeChars+3 {
				t.Fatalf("Deadline(%q) = %v, %v, %v", s, d, ok, err)
			}
			return
		}
		if !ok || d.IsZero() {
			t.Fatalf("Deadline(%q) = %v, %v", s, d, ok)
		}
	})
}
