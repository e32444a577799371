package grant

import (
	"os"
	"time"
)

// renameRetryFor bounds how long a rename over a file another process has
// open is tried again: a reader holds the manifest for one read.
const renameRetryFor = 2 * time.Second

// renameOver renames tmp over path. On Windows that fails while another
// process has path open without sharing its deletion (os.Open's readers do
// not share it; a server rereading the manifest, an editor, a virus
// scanner), so a rename refused that way is tried again until the reader
// is done, within renameRetryFor. Elsewhere nothing refuses it that way.
func renameOver(tmp, path string) error {
	return retryRename(func() error { return os.Rename(tmp, path) }, renameRefusedInUse, time.Sleep)
}

// retryRename calls rename until it succeeds, fails in a way inUse does
// not recognise, or has been refused in use for renameRetryFor; sleep
// waits between tries, from 5 ms doubling to 200 ms.
func retryRename(rename func() error, inUse func(error) bool, sleep func(time.Duration)) error {
	delay, waited := 5*time.Millisecond, time.Duration(0)
	for {
		err := rename()
		if err == nil || !inUse(err) || waited >= renameRetryFor {
			return err
		}
		sleep(delay)
		waited += delay
		delay = min(2*delay, 200*time.Millisecond)
	}
}
