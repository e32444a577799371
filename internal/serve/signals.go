package serve

import (
	"log/slog"
	"os"
	"sync"
)

// reopener is what a hang-up reopens: the audit file.
type reopener interface {
	Reopen() error
}

// watchHangup reopens the audit file each time hangup delivers (SIGHUP,
// sent by logrotate after it renamed the file), for as long as the run
// lasts; the returned stop ends the watch and waits for a reopen under way.
// A reopen that fails keeps the file already open (audit.Log.Reopen) and
// is logged at WARN with the reason; the server keeps serving either way.
// A nil hangup watches nothing.
func watchHangup(hangup <-chan os.Signal, a reopener, logger *slog.Logger) (stop func()) {
	if hangup == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-hangup:
				if err := a.Reopen(); err != nil {
					logger.Warn("hang-up: the audit file could not be reopened; still writing to the file already open", "err", err)
					continue
				}
				logger.Info("hang-up: audit file reopened")
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
