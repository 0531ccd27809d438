//go:build !race

package xk6mocker

const raceEnabled = false
