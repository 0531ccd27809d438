package main

import (
	"fmt"
	"io"

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
