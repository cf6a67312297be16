package remediation

import (
	"time"

	"golang.org/x/time/rate"
)

// Bucket is a token bucket: it holds at most Burst tokens and gains
// PerMinute tokens per minute, starting full. It is golang.org/x/time/rate's
// Limiter, always given the caller's time (the *At and *N methods), never
// the wall clock.
//
// Worked example: PerMinute 6, Burst 3 starts full (3 evictions at once),
// then allows one more every 10 s.
type Bucket struct {
	PerMinute float64
	Burst     float64

	lim *rate.Limiter
}

// NewBucket returns a full bucket. A fractional burst is rounded down
// (Config.Validate asks for whole bursts of at least 1).
func NewBucket(perMinute, burst float64) *Bucket {
	return &Bucket{PerMinute: perMinute, Burst: burst, lim: rate.NewLimiter(rate.Limit(perMinute/60), int(burst))}
}

// Tokens returns the tokens available at now.
func (b *Bucket) Tokens(now time.Time) float64 {
	return b.lim.TokensAt(now)
}

// AllowN takes n tokens at now if the bucket holds them, and reports
// whether it did. It takes nothing otherwise.
func (b *Bucket) AllowN(now time.Time, n int) bool {
	return b.lim.AllowN(now, n)
}

// Limiter bounds evictions cluster-wide and per faulty node: an eviction
// needs a token from both buckets.
type Limiter struct {
	cluster         *Bucket
	nodeRate, nodeB float64
	nodes           map[string]*Bucket
}

// NewLimiter builds a limiter: perMinute evictions cluster-wide (burst
// burst) and nodePerMinute per node (burst nodeBurst).
func NewLimiter(perMinute, burst, nodePerMinute, nodeBurst float64) *Limiter {
	return &Limiter{cluster: NewBucket(perMinute, burst), nodeRate: nodePerMinute, nodeB: nodeBurst,
		nodes: map[string]*Bucket{}}
}

// AllowN takes n tokens from the cluster bucket and node's bucket, all or
// nothing, and reports whether it did. A gang needs one token per member,
// so it is deleted whole or not at all.
func (l *Limiter) AllowN(node string, now time.Time, n int) bool {
	nb := l.nodes[node]
	if nb == nil {
		nb = NewBucket(l.nodeRate, l.nodeB)
		l.nodes[node] = nb
	}
	if nb.Tokens(now) < float64(n) || l.cluster.Tokens(now) < float64(n) {
		return false
	}
	nb.AllowN(now, n)
	l.cluster.AllowN(now, n)
	return true
}

// Forget drops full per-node buckets, so the map does not grow with every
// node that ever failed.
func (l *Limiter) Forget(now time.Time) {
	for k, b := range l.nodes {
		if b.Tokens(now) >= b.Burst {
			delete(l.nodes, k)
		}
	}
}
