// Command mps-standin is deviceplugin/mps/mpsfake as a program of its own:
// the stand-in for nvidia-cuda-mps-control that the real-node suite hands
// rota-device-plugin (--mps-binary). TestMPSDaemonLifecycle builds it into
// its folder; "-d" starts a daemon that serves a control socket and writes
// its PID file in CUDA_MPS_PIPE_DIRECTORY, as the real one does.
package main

import (
	"os"

	"github.com/rota-sched/rota/deviceplugin/mps/mpsfake"
)

func main() { os.Exit(mpsfake.Main(os.Args[1:])) }
