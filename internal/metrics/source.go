package metrics

import (
	"context"
	"time"

	"github.com/malachi-log/malachi/internal/broker"
	"github.com/malachi-log/malachi/internal/control"
	"github.com/malachi-log/malachi/internal/replica"
	"github.com/malachi-log/malachi/internal/server"
	"github.com/malachi-log/malachi/internal/storage"
)

// source is what the collector reads: a node, or a fake in the tests.
// Every method is a snapshot; ok false means the node has no such part
// (no client server, no cluster), and its series are left out.
type source interface {
	started() time.Time
	traffic() (server.Traffic, bool)
	counters() broker.Counters
	store() (storage.Stats, storage.Histograms)
	readPool() storage.ReadPoolStats
	disk() string
	topics() []broker.TopicSummary
	groupLags(ctx context.Context, bg broker.LagBudget) broker.LagReport
	cluster() (broker.ClusterStats, bool)
	raft() (control.RaftStats, bool)
	replication() (replica.Lag, bool)
}

type nodeSource struct {
	b   *broker.Broker
	srv *server.Server
}

func (n nodeSource) started() time.Time { return n.b.Started() }

func (n nodeSource) traffic() (server.Traffic, bool) {
	if n.srv == nil {
		return server.Traffic{}, false
	}
	return n.srv.Traffic(), true
}

func (n nodeSource) counters() broker.Counters                  { return n.b.Counters() }
func (n nodeSource) store() (storage.Stats, storage.Histograms) { return n.b.StoreStats() }
func (n nodeSource) disk() string                               { return n.b.DiskState() }
func (n nodeSource) readPool() storage.ReadPoolStats            { return storage.SharedReadPoolStats() }
func (n nodeSource) topics() []broker.TopicSummary              { return n.b.LedTopics() }

func (n nodeSource) groupLags(ctx context.Context, bg broker.LagBudget) broker.LagReport {
	return n.b.GroupLags(ctx, bg)
}

func (n nodeSource) cluster() (broker.ClusterStats, bool) { return n.b.ClusterStats() }

func (n nodeSource) raft() (control.RaftStats, bool)  { return n.b.RaftStats() }
func (n nodeSource) replication() (replica.Lag, bool) { return n.b.ReplicationLag() }
