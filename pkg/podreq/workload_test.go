package podreq

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rota-sched/rota/pkg/contract"
)

func TestJobGang(t *testing.T) {
	n := names
	job := func(mode batchv1.CompletionMode, completions, parallelism int32, mut ...func(*batchv1.Job)) *batchv1.Job {
		j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml"},
			Spec: batchv1.JobSpec{CompletionMode: &mode, Completions: &completions, Parallelism: &parallelism}}
		for _, m := range mut {
			m(j)
		}
		return j
	}
	yes := true
	tests := []struct {
		name     string
		job      *batchv1.Job
		wantSize int
	}{
		{"Indexed, completions = parallelism", job(batchv1.IndexedCompletion, 4, 4), 4},
		{"Indexed, one pod", job(batchv1.IndexedCompletion, 1, 1), 0},
		{"Indexed, fewer at a time than completions", job(batchv1.IndexedCompletion, 8, 4), 0},
		{"NonIndexed batch", job(batchv1.NonIndexedCompletion, 4, 4), 0},
		{"no completion mode", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) { j.Spec.CompletionMode = nil }), 0},
		{"no completions", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) { j.Spec.Completions = nil }), 0},
		{"opted out on the Job", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) {
			j.Annotations = map[string]string{n.NoGangAnnotation: "true"}
		}), 0},
		{"opted out on the template", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) {
			j.Spec.Template.Annotations = map[string]string{n.NoGangAnnotation: "true"}
		}), 0},
		{"the template names its own gang", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) {
			j.Spec.Template.Labels = map[string]string{n.GangLabel: "other"}
		}), 0},
		{"controlled by a JobSet", job(batchv1.IndexedCompletion, 4, 4, func(j *batchv1.Job) {
			j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "jobset.x-k8s.io/v1alpha2", Kind: "JobSet", Name: "s", UID: "u", Controller: &yes}}
		}), 0},
		{"nil", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, size, ok := JobGang(tc.job, n)
			if ok != (tc.wantSize > 0) || size != tc.wantSize || (ok && name != "train") {
				t.Fatalf("JobGang = %q, %d, %v; want size %d", name, size, ok, tc.wantSize)
			}
		})
	}
}

func TestJobSetGang(t *testing.T) {
	n := names
	indexed, nonIndexed := batchv1.IndexedCompletion, batchv1.NonIndexedCompletion
	tmpl := func(mode batchv1.CompletionMode, completions, parallelism int32) batchv1.JobTemplateSpec {
		return batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{CompletionMode: &mode, Completions: &completions, Parallelism: &parallelism,
			Template: gpuTemplate()}}
	}
	// A leader (1 Job of 1 pod) and workers (2 Jobs of 4 pods).
	base := func() JobSetShape {
		return JobSetShape{Name: "llm", ReplicatedJobs: []ReplicatedJobShape{
			{Name: "leader", Replicas: 1, Template: tmpl(indexed, 1, 1)},
			{Name: "workers", Replicas: 2, Template: tmpl(indexed, 4, 4)}}}
	}
	tests := []struct {
		name     string
		js       func(*JobSetShape)
		rjob     string
		wantName string
		wantSize int
	}{
		{"all at once: one gang of every pod", nil, "workers", "llm", 9},
		{"the leader's pod is in the same gang", nil, "leader", "llm", 9},
		{"in order: each replicated job its own gang", func(j *JobSetShape) { j.InOrder = true }, "workers", "llm-workers", 8},
		{"dependsOn: a one-pod leader is no gang", func(j *JobSetShape) { j.ReplicatedJobs[1].DependsOn = true }, "leader", "", 0},
		{"dependsOn: the workers are a gang", func(j *JobSetShape) { j.ReplicatedJobs[1].DependsOn = true }, "workers", "llm-workers", 8},
		{"a batch replicated job: no gang of the whole", func(j *JobSetShape) { j.ReplicatedJobs[0].Template = tmpl(nonIndexed, 1, 1) }, "workers", "", 0},
		{"more completions than parallelism", func(j *JobSetShape) { j.ReplicatedJobs[1].Template = tmpl(indexed, 8, 4) }, "leader", "", 0},
		{"opted out on the JobSet", func(j *JobSetShape) { j.NoGang = true }, "workers", "", 0},
		{"opted out on a pod template", func(j *JobSetShape) {
			j.ReplicatedJobs[1].Template.Spec.Template.Annotations = map[string]string{n.NoGangAnnotation: "true"}
		}, "workers", "", 0},
		{"a template names its own gang", func(j *JobSetShape) {
			j.ReplicatedJobs[1].Template.Spec.Template.Labels = map[string]string{n.GangLabel: "mine"}
		}, "leader", "", 0},
		{"unknown replicated job", nil, "ps", "", 0},
		{"a coordinator without GPUs is not counted", func(j *JobSetShape) {
			j.ReplicatedJobs[0].Template.Spec.Template = corev1.PodTemplateSpec{}
		}, "workers", "llm", 8},
		{"in order, the coordinator's own pods are no gang", func(j *JobSetShape) {
			j.InOrder = true
			j.ReplicatedJobs[0].Template.Spec.Template = corev1.PodTemplateSpec{}
		}, "leader", "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			js := base()
			if tc.js != nil {
				tc.js(&js)
			}
			name, size, ok := JobSetGang(js, tc.rjob, n)
			if ok != (tc.wantSize > 0) || name != tc.wantName || size != tc.wantSize {
				t.Fatalf("JobSetGang = %q, %d, %v; want %q, %d", name, size, ok, tc.wantName, tc.wantSize)
			}
		})
	}
}

func TestParseJobSet(t *testing.T) {
	raw := []byte(`{"apiVersion":"jobset.x-k8s.io/v1alpha2","kind":"JobSet","metadata":{"name":"llm","annotations":{"example.com/no-gang":"true"}},
"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},"replicatedJobs":[
 {"name":"leader","template":{"spec":{"parallelism":1,"completions":1,"completionMode":"Indexed"}}},
 {"name":"workers","replicas":2,"dependsOn":[{"name":"leader","status":"Ready"}],"template":{"spec":{"parallelism":4,"completions":4,"completionMode":"Indexed"}}}]}}`)
	js, err := ParseJobSet(raw, names)
	if err != nil {
		t.Fatal(err)
	}
	if js.Name != "llm" || !js.NoGang || !js.InOrder || len(js.ReplicatedJobs) != 2 || js.ReplicatedJobs[0].Replicas != 1 ||
		js.ReplicatedJobs[1].Replicas != 2 || !js.ReplicatedJobs[1].DependsOn || js.ReplicatedJobs[0].DependsOn ||
		*js.ReplicatedJobs[1].Template.Spec.Parallelism != 4 {
		t.Fatalf("ParseJobSet = %+v", js)
	}
	for _, bad := range []string{`{`, `{"spec":{"replicatedJobs":[{"name":"a","replicas":-1}]}}`, `{"spec":{"replicatedJobs":"x"}}`} {
		if _, err := ParseJobSet([]byte(bad), names); err == nil {
			t.Errorf("ParseJobSet(%s) accepted it", bad)
		}
	}
}

// ParseJobSet and JobSetGang never panic on what a JobSet object may hold.
func FuzzParseJobSet(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"a"},"spec":{"replicatedJobs":[{"name":"w","replicas":2,"template":{"spec":{"parallelism":2,"completions":2,"completionMode":"Indexed"}}}]}}`))
	f.Add([]byte(`{"spec":{"startupPolicy":{"startupPolicyOrder":"InOrder"},"replicatedJobs":[{"name":"w","dependsOn":[{}]}]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		js, err := ParseJobSet(raw, names)
		if err != nil {
			return
		}
		for _, r := range js.ReplicatedJobs {
			if _, size, ok := JobSetGang(js, r.Name, names); ok && (size < 2 || size > contract.MaxGangSize) {
				t.Fatalf("a gang of %d", size)
			}
		}
	})
}

func TestLWSGang(t *testing.T) {
	n := names
	gpus := `"workerTemplate":{"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"1"}}}]}}`
	raw := func(spec string, ann string) []byte {
		return []byte(`{"metadata":{"name":"serve","annotations":{` + ann + `}},"spec":{` + spec + `}}`)
	}
	tests := []struct {
		name     string
		raw      []byte
		group    string
		wantSize int
	}{
		{"LeaderCreated, 4 per group", raw(`"startupPolicy":"LeaderCreated","leaderWorkerTemplate":{"size":4,`+gpus+`}`, ``), "2", 4},
		{"no startup policy (LeaderCreated is the default)", raw(`"leaderWorkerTemplate":{"size":4,`+gpus+`}`, ``), "0", 4},
		{"a leader without GPUs is not counted", raw(`"leaderWorkerTemplate":{"size":4,`+gpus+`,"leaderTemplate":{"spec":{"containers":[{"name":"c"}]}}}`, ``), "0", 3},
		{"workers without GPUs", raw(`"leaderWorkerTemplate":{"size":4}`, ``), "0", 0},
		{"LeaderReady: workers come later", raw(`"startupPolicy":"LeaderReady","leaderWorkerTemplate":{"size":4,`+gpus+`}`, ``), "0", 0},
		{"exclusive placement", raw(`"leaderWorkerTemplate":{"size":4,`+gpus+`}`, `"leaderworkerset.sigs.k8s.io/exclusive-topology":"example.com/leaf"`), "0", 0},
		{"one pod per group", raw(`"leaderWorkerTemplate":{`+gpus+`}`, ``), "0", 0},
		{"opted out", raw(`"leaderWorkerTemplate":{"size":4,`+gpus+`}`, `"example.com/no-gang":"true"`), "0", 0},
		{"the worker template names a gang", raw(`"leaderWorkerTemplate":{"size":4,"workerTemplate":{"metadata":{"labels":{"example.com/gang":"g"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"1"}}}]}}}`, ``), "0", 0},
		{"no group index", raw(`"leaderWorkerTemplate":{"size":4,`+gpus+`}`, ``), "", 0},
		{"a group index that is not a number", raw(`"leaderWorkerTemplate":{"size":4,`+gpus+`}`, ``), "x", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lws, err := ParseLWS(tc.raw, n)
			if err != nil {
				t.Fatal(err)
			}
			name, size, ok := LWSGang(lws, tc.group)
			if ok != (tc.wantSize > 0) || size != tc.wantSize || (ok && name != "serve-"+tc.group) {
				t.Fatalf("LWSGang = %q, %d, %v; want size %d", name, size, ok, tc.wantSize)
			}
		})
	}
	if _, err := ParseLWS([]byte(`{"spec":[]}`), n); err == nil {
		t.Error("ParseLWS accepted a spec that is a list")
	}
}

func FuzzParseLWS(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"s"},"spec":{"leaderWorkerTemplate":{"size":3}}}`), "1")
	f.Fuzz(func(t *testing.T, raw []byte, group string) {
		lws, err := ParseLWS(raw, names)
		if err != nil {
			return
		}
		if _, size, ok := LWSGang(lws, group); ok && (size < 2 || size > contract.MaxGangSize) {
			t.Fatalf("a gang of %d", size)
		}
	})
}

// gpuTemplate is a pod template that asks for one whole GPU.
func gpuTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(names.GPU): resource.MustParse("1")}}}}}}
}

func TestTrainingJobGang(t *testing.T) {
	gpu := `"template":{"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"8"}}}]}}`
	cpu := `"template":{"spec":{"containers":[{"name":"c"}]}}`
	tests := []struct {
		name, kind, spec string
		wantSize         int
	}{
		{"PyTorchJob: master and workers", "PyTorchJob", `"pytorchReplicaSpecs":{"Master":{"replicas":1,` + gpu + `},"Worker":{"replicas":3,` + gpu + `}}`, 4},
		{"a replica type without replicas has one", "PyTorchJob", `"pytorchReplicaSpecs":{"Master":{` + gpu + `},"Worker":{"replicas":1,` + gpu + `}}`, 2},
		{"elastic: no gang", "PyTorchJob", `"elasticPolicy":{"minReplicas":1},"pytorchReplicaSpecs":{"Worker":{"replicas":4,` + gpu + `}}`, 0},
		{"MPIJob: a CPU launcher is not counted", "MPIJob", `"mpiReplicaSpecs":{"Launcher":{"replicas":1,` + cpu + `},"Worker":{"replicas":4,` + gpu + `}}`, 4},
		{"MPIJob: a launcher created once the workers run is not counted", "MPIJob",
			`"launcherCreationPolicy":"WaitForWorkersReady","mpiReplicaSpecs":{"Launcher":{"replicas":1,` + gpu + `},"Worker":{"replicas":2,` + gpu + `}}`, 2},
		{"MPIJob: a GPU launcher created with the workers is", "MPIJob", `"mpiReplicaSpecs":{"Launcher":{"replicas":1,` + gpu + `},"Worker":{"replicas":2,` + gpu + `}}`, 3},
		{"TFJob: one GPU worker is no gang", "TFJob", `"tfReplicaSpecs":{"PS":{"replicas":2,` + cpu + `},"Worker":{"replicas":1,` + gpu + `}}`, 0},
		{"a template names its own gang", "PyTorchJob",
			`"pytorchReplicaSpecs":{"Worker":{"replicas":4,"template":{"metadata":{"labels":{"example.com/gang":"g"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"example.com/gpu":"8"}}}]}}}}`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j, err := ParseTrainingJob(tc.kind, []byte(`{"metadata":{"name":"train"},"spec":{`+tc.spec+`}}`), names)
			if err != nil {
				t.Fatal(err)
			}
			name, size, ok := TrainingJobGang(j)
			if ok != (tc.wantSize > 0) || size != tc.wantSize || (ok && name != "train") {
				t.Fatalf("TrainingJobGang = %q, %d, %v; want size %d", name, size, ok, tc.wantSize)
			}
		})
	}
	for _, bad := range [][2]string{{"Deployment", `{}`}, {"PyTorchJob", `{"spec":{"pytorchReplicaSpecs":[]}}`},
		{"PyTorchJob", `{"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":-2}}}}`}, {"MPIJob", `[`}} {
		if _, err := ParseTrainingJob(bad[0], []byte(bad[1]), names); err == nil {
			t.Errorf("ParseTrainingJob(%s, %s) accepted it", bad[0], bad[1])
		}
	}
	if j, err := ParseTrainingJob("PyTorchJob", []byte(`{"metadata":{"name":"t","annotations":{"example.com/no-gang":"true"}},"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":4,`+gpu+`}}}}`), names); err != nil {
		t.Fatal(err)
	} else if _, _, ok := TrainingJobGang(j); ok {
		t.Error("a job that opts out is a gang")
	}
}

func FuzzParseTrainingJob(f *testing.F) {
	f.Add("PyTorchJob", []byte(`{"metadata":{"name":"t"},"spec":{"pytorchReplicaSpecs":{"Worker":{"replicas":4}}}}`))
	f.Add("MPIJob", []byte(`{"spec":{"launcherCreationPolicy":7,"mpiReplicaSpecs":{"Launcher":{}}}}`))
	f.Fuzz(func(t *testing.T, kind string, raw []byte) {
		j, err := ParseTrainingJob(kind, raw, names)
		if err != nil {
			return
		}
		if _, size, ok := TrainingJobGang(j); ok && (size < 2 || size > contract.MaxGangSize) {
			t.Fatalf("a gang of %d", size)
		}
	})
}
