package registry

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
)

// distribution logs through the process-wide logrus standard logger and
// offers no exported way to give an App its own logger. It does put the
// context value "instance.id" (a plain string key) into every log entry it
// derives from a context without a logger, so each Registry tags its App
// and request contexts with its own id and one process-wide logrus hook
// routes entries to that Registry's slog.Logger. Entries without an id
// (package-level logrus calls, e.g. token verification failures) go to the
// oldest live Registry's logger.
//
// Process-wide side effects (installed once): the logrus standard logger
// gets io.Discard as output, a no-op formatter and this hook.

// instanceKey is the context key distribution reads ("instance.id"); it must
// be the untyped string, so it cannot be a private key type.
const instanceKey = "instance.id"

type logRouter struct {
	mu      sync.RWMutex
	loggers map[string]*slog.Logger
	order   []string
}

var (
	bridgeOnce sync.Once
	bridge     = &logRouter{loggers: map[string]*slog.Logger{}}
)

func registerLogger(id string, logger *slog.Logger) (unregister func()) {
	bridgeOnce.Do(func() {
		std := logrus.StandardLogger()
		std.SetOutput(io.Discard)
		std.SetFormatter(nopFormatter{})
		std.SetLevel(logrus.InfoLevel)
		std.AddHook(bridge)
	})
	bridge.mu.Lock()
	bridge.loggers[id] = logger
	bridge.order = append(bridge.order, id)
	bridge.mu.Unlock()
	return func() {
		bridge.mu.Lock()
		delete(bridge.loggers, id)
		for i, o := range bridge.order {
			if o == id {
				bridge.order = append(bridge.order[:i], bridge.order[i+1:]...)
				break
			}
		}
		bridge.mu.Unlock()
	}
}

func (*logRouter) Levels() []logrus.Level { return logrus.AllLevels }

func (b *logRouter) Fire(e *logrus.Entry) error {
	id, _ := e.Data[instanceKey].(string)
	b.mu.RLock()
	logger := b.loggers[id]
	if logger == nil && len(b.order) > 0 {
		logger = b.loggers[b.order[0]]
	}
	b.mu.RUnlock()
	if logger == nil {
		return nil
	}
	level := slogLevel(e)
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	if !logger.Enabled(ctx, level) {
		return nil
	}
	attrs := make([]slog.Attr, 0, len(e.Data)+1)
	attrs = append(attrs, slog.String("subsystem", "distribution"))
	for k, v := range e.Data {
		if k == instanceKey || k == "go.version" {
			continue
		}
		if err, ok := v.(error); ok {
			v = err.Error()
		}
		attrs = append(attrs, slog.Any(k, v))
	}
	logger.LogAttrs(ctx, level, e.Message, attrs...)
	return nil
}

// slogLevel maps logrus levels. distribution logs every request at Info
// ("response completed", "authorized request") and every token challenge
// at Warn ("error authorizing context"), which is routine in token auth:
// those become Debug.
func slogLevel(e *logrus.Entry) slog.Level {
	switch {
	case e.Level <= logrus.ErrorLevel:
		return slog.LevelError
	case e.Level == logrus.WarnLevel:
		if strings.HasPrefix(e.Message, "error authorizing context") {
			return slog.LevelDebug
		}
		return slog.LevelWarn
	default:
		return slog.LevelDebug
	}
}

type nopFormatter struct{}

func (nopFormatter) Format(*logrus.Entry) ([]byte, error) { return nil, nil }
