package handoff

import (
	"strconv"
	"strings"
)

// memorySep separates the GPU UUID from the unit number in gpu-memory
// device IDs: "GPU-8f2c…::17".
const memorySep = "::"

// MemoryDeviceID names memory unit n of the GPU uuid.
func MemoryDeviceID(uuid string, n int) string {
	return uuid + memorySep + strconv.Itoa(n)
}

// ParseMemoryDeviceID splits a gpu-memory device ID into GPU UUID and unit.
func ParseMemoryDeviceID(id string) (uuid string, n int, ok bool) {
	uuid, num, found := strings.Cut(id, memorySep)
	if !found || uuid == "" || num == "" || len(num) > 7 {
		return "", 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || strconv.Itoa(n) != num {
		return "", 0, false
	}
	return uuid, n, true
}
