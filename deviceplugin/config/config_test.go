package config

import (
	"slices"
	"strings"
	"testing"
)

func TestValidateReportsEverything(t *testing.T) {
	c := Default()
	c.Domain = "Bad_Domain"
	c.DevicePluginDir = "relative"
	c.MemoryUnitMiB = 0
	c.Backend = BackendMock
	c.MockServer = "dgx1"
	err := c.Validate()
	for _, want := range []string{"node-name", "device-plugin-dir", "memory-unit-mib", "mock-server", "domain"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
	c = Default()
	c.NodeName = "n"
	if err := c.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	c.Profiling = true
	if err := c.Validate(); err != nil {
		t.Errorf("profiling on the default metrics listener: %v", err)
	}
	c.MetricsListen = ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "profiling") {
		t.Errorf("profiling without metrics-listen: Validate() = %v, want it to mention profiling", err)
	}
}

func TestValidateDRAMode(t *testing.T) {
	c := Default()
	c.NodeName = "n"
	c.DRAMode = true
	if err := c.Validate(); err != nil || c.DRADriverName() != "gpu."+c.Domain {
		t.Fatalf("DRA mode with defaults: %v, driver %s", err, c.DRADriverName())
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.CDIDir = "cdi" }, "cdi-dir"},
		{func(c *Config) { c.KubeletDir = "" }, "kubelet-dir"},
		{func(c *Config) { c.DRADriver = "Not_A_Name" }, "dra-driver"},
		{func(c *Config) { c.DRADriver = "gpu" }, "dra-driver"},
		{func(c *Config) { c.DRADriver = "gpu.nvidia.com" }, "also in dra-gpu-drivers"},
	} {
		d := c
		tc.edit(&d)
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, tc.want)
		}
		d.DRAMode = false
		if err := d.Validate(); err != nil {
			t.Errorf("the DRA mode's flags are checked with the mode off: %v", err)
		}
	}
}

func TestParseXIDs(t *testing.T) {
	got, err := ParseXIDs(" 13,31, ,109")
	if err != nil || !slices.Equal(got, []uint64{13, 31, 109}) {
		t.Errorf("ParseXIDs = %v %v", got, err)
	}
	if _, err := ParseXIDs("13,x"); err == nil {
		t.Error("ParseXIDs accepted x")
	}
}
