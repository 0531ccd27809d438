// Package options reads a k6 script's exported options: the scenarios with
// their executors (or the vus/duration/iterations/stages shortcuts that
// stand for one), thresholds, tags, summary settings and setup/teardown
// switches, with the CLI overrides applied as k6 applies them. It sees the
// options as JSON and never a JavaScript runtime, so every rule is testable
// on its own; its errors name the offending field.
package options
