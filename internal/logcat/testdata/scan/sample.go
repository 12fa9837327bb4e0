package sample

import (
	"context"
	"log/slog"
)

type node struct {
	log *slog.Logger
	cfg struct{ Logger *slog.Logger }
}

func (n *node) run(ctx context.Context, logger *slog.Logger, msg string) {
	n.log.Info("plain literal", "k", 1)
	n.cfg.Logger.WarnContext(ctx, "context form")
	logger.Log(ctx, slog.LevelDebug, "log form")
	n.log.With("a", 1).WithGroup("g").Error("through With")
	slog.Debug("package function")
	n.log.Warn(`raw literal`)
	n.log.Info(msg) // a parameter: the literals run's callers pass would count; it has none
	n.log.Info(fmt.Sprint("built"))
	n.relay("relayed literal")
	n.relay(msg)
	n.other.Info("not a logger")
	errors.Error("not a logger either")
}

func (n *node) relay(what string) {
	n.log.Warn(what, "x", 2)
}
