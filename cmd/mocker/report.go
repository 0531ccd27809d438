package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/kvstrand/mocker/report"
)

// reportWriter writes the --report file when the plugin hands the run's
// report over, at the end of the run or on interrupt.
type reportWriter struct {
	path, title string
	stderr      io.Writer
	written     bool
}

func (w *reportWriter) write(r report.Report) {
	r.Title = w.title
	if err := report.WriteFile(w.path, r); err != nil {
		fmt.Fprintf(w.stderr, "mocker run: --report: %v\n", err)
		return
	}
	w.written = true
}

// done says so when no report could be written: the run ended before its
// summary (an error in the init context), or the script never imported
// k6/x/mocker, whose clusters the report is about.
func (w *reportWriter) done() {
	if !w.written {
		fmt.Fprintf(w.stderr, "mocker run: --report %s: no report written: the run ended before its summary or the script does not import k6/x/mocker\n", w.path)
	}
}

// checkWritable makes sure path can be created or written, without
// changing an existing file and without leaving a new one behind.
func checkWritable(path string) error {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err
		}
		return err
	}
	err = f.Close()
	if errors.Is(statErr, fs.ErrNotExist) {
		_ = os.Remove(path)
	}
	return err
}
