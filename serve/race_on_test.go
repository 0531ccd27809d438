//go:build race

package serve

// raceEnabled: the race detector's shadow memory raises every process's
// resident memory several times over.
const raceEnabled = true
