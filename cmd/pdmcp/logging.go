package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
)

// logFlags are the root command's persistent logging flags. Everything the
// process logs goes through the one handler they choose: pdmcp's own
// records, the libraries' slog loggers, and (through slog.SetDefault) the
// standard library's log package, which net/http's servers without an
// ErrorLog write to.
type logFlags struct {
	level   string
	format  string
	verbose bool
}

func (f *logFlags) register(cmd *cobra.Command) {
	p := cmd.PersistentFlags()
	p.StringVar(&f.level, "log-level", "", "least level logged to standard error: debug, info, warn or error "+
		"(default: info for serve and dev, warn for the other commands)")
	p.StringVar(&f.format, "log-format", "text", "log lines as text (key=value) or json (one object a line, for journald and collectors)")
	p.BoolVarP(&f.verbose, "verbose", "v", false, "log one level more: info for the operator commands, debug for serve and dev")
	_ = cmd.RegisterFlagCompletionFunc("log-level", completeWords("debug", "info", "warn", "error"))
	_ = cmd.RegisterFlagCompletionFunc("log-format", completeWords("text", "json"))
}

// serverCommands log at INFO by default: they run for long and their log
// is how an operator follows them. Every other command is quiet (WARN and
// above) unless asked, so a script sees only its output.
var serverCommands = map[string]bool{"serve": true, "dev": true}

// defaultLevel is cmd's least level logged when neither --log-level nor
// -v is given.
func defaultLevel(cmd *cobra.Command) slog.Level {
	top := cmd
	for top.HasParent() && top.Parent().HasParent() {
		top = top.Parent()
	}
	if serverCommands[top.Name()] {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// parseLevel takes only the four names documented (slog would also take
// "info+2" and the like).
func parseLevel(s string) (slog.Level, error) {
	switch s {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("--log-level %q: use debug, info, warn or error", s)
}

// logger is the logger cmd runs with, writing to w.
func (f *logFlags) logger(cmd *cobra.Command, w io.Writer) (*slog.Logger, error) {
	level := defaultLevel(cmd)
	if f.verbose {
		level -= 4 // one step: WARN to INFO, INFO to DEBUG
	}
	if f.level != "" {
		l, err := parseLevel(f.level)
		if err != nil {
			return nil, err
		}
		level = l
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", f.format)
}

// setUp makes cmd's logger and puts it in cmd's context (loggerFrom).
func (f *logFlags) setUp(cmd *cobra.Command) error {
	l, err := f.logger(cmd, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	// The process's default too: slog.Default()'s users and the log
	// package (net/http's ErrorLog when unset, at INFO) go through l's
	// handler. The root command runs once per process.
	slog.SetDefault(l)
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	cmd.SetContext(context.WithValue(ctx, loggerKey{}, l))
	return nil
}

type loggerKey struct{}

// loggerFrom is the logger the root command set up; slog.Default() for a
// command run without it (a test calling a subcommand alone).
func loggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}
