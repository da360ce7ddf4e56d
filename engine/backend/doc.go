// Package backend opens a checkpoint on a backend named as the --backend
// flag names it: the CPU reference, the simulated GPU or Metal. It is the
// one list of backends that every command, the server and the app share.
package backend
