// Package serverfuzz holds deviceplugin/server's fuzz targets, apart from
// the package's own tests so that their test binary links only what the
// plugin links. The fuzzing engine instruments every package of the test
// binary and, for every input, snapshots and compares the whole coverage
// map (and ships it to its workers every 100 ms): beside server's tests,
// which bring the fake clientset, the map was 430 KiB and the targets ran
// 27 to 650 inputs a second on a loaded 2-core machine; here it is 155 KiB.
package serverfuzz
