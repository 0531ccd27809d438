package xk6mocker

import "github.com/kvstrand/mocker/harness"

// refuseInInit throws when the script calls what in the init context: as
// k6 modules refuse network I/O there, a cluster takes requests (and is
// drained, slept on or read) only from setup, exec functions or teardown.
// mocker.cluster(...) itself stays allowed in init.
func (inst *instance) refuseInInit(what string) {
	if err := harness.NotInInit(inst.vu, what); err != nil {
		throw(inst.rt, err)
	}
}
