// Package quota is Rota's team quota: the configuration format (teams with a
// guaranteed amount of GPUs and GPU memory, a borrow limit, a priority
// ceiling, and one shared pool that teams borrow from), its parser, and the
// pure accounting that decides whether a team may take more.
//
// Quota counts two resources. Whole GPUs (the gpu resource) are counted
// against "gpus"; memory shares (the gpu-memory resource, converted to MiB
// with the cluster's memory unit) are counted against "gpuMemoryGiB". A
// whole GPU does not also count against gpuMemoryGiB.
//
// The package is pure: it imports only the standard library and
// pkg/contract, takes no time from the clock and keeps no state. Callers
// (the admission webhook) own the usage view and its locking; every value
// here is immutable once built and safe for concurrent reads.
package quota
