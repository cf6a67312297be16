// Package sim replays pod lists against a simulated GPU cluster through
// Rota's own placement engine: pkg/placement's Fit decides feasibility and
// GPUs, a placement.Policy scores every feasible node, the best score wins
// (ties: lowest node name, as placement.Rank orders them), and pkg/ledger
// records the allocation exactly as the extender does (Reserve, then
// Commit). There is no second implementation of fit or score here.
//
// The default protocol is the one of the FGD paper (Weng et al., USENIX
// ATC'23) on Alibaba's openb trace: pods arrive one at a time in a shuffled
// order (resampled with replacement until the arrived GPU request reaches
// Tune x the cluster's GPU capacity), never leave, and a pod that does not
// fit when it arrives fails for good. After every pod the run records the
// GPU allocation ratio and the fragmentation amount and ratio against the
// arrived GPU request.
//
// RunTimed is the time-aware mode: jobs (one pod, or a gang of identical
// members) arrive at their times, are admitted against team quota
// (pkg/quota), wait in a queue ordered by priority then arrival with
// backfill, are placed (one pod through the policy, a gang all-or-nothing
// through placement.PlanGang and ledger.ReserveAll), run for their duration
// and leave. It reports utilization over time, queue waits, GPU-hours idle
// while work waited, gang waits and quota use. TraceJobs builds jobs from a
// pod list's creation and deletion times; GangLoad generates a training
// cluster's teams, gangs and topology with durations drawn from a runtime
// sample (testdata/philly). With TimedConfig.Reserve (on Rota's queue),
// every queue pass is followed by the queue controller's reservation pass
// (pkg/reserve.Policy.Pass) and its claims go into the ledger, so pods
// backfill held GPUs only when their declared runtime (Job.Declared,
// DeclareRuntimes) ends by the held job's expected start.
//
// GPU shares: a trace's gpu_milli is a share of one GPU. Every simulated GPU
// has 1000 MiB of memory and a memory unit of 1 MiB, so a share of m
// thousandths is exactly m memory units and whole GPUs are whole GPUs.
//
// The package is pure: it reads from io.Readers and writes to io.Writers it
// is given, takes seeds from its caller and never reads the clock. Run is
// safe to call from several goroutines at once (each run owns its ledger);
// a Policy value must not be shared between concurrent runs when it keeps
// state (the random baseline does).
package sim
