package config

import (
	"strings"
	"testing"
	"time"
)

func TestValidateUsage(t *testing.T) {
	tests := []struct {
		name    string
		give    func(*Config)
		wantErr string // "" when valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"idle marks on", func(c *Config) { c.IdleAfter, c.PublishUtilization = 30*time.Minute, true }, ""},
		{"negative idle-after", func(c *Config) { c.IdleAfter = -time.Second }, "usage-interval/usage-window/idle-after"},
		{"window shorter than the interval", func(c *Config) { c.UsageWindow = time.Second }, "usage-window"},
		{"ratio over 1", func(c *Config) { c.IdleUtilization = 5 }, "idle-utilization: 5 is not a ratio in 0..1 (0.05 is 5%)"},
		{"idle marks without sampling", func(c *Config) { c.UsageInterval, c.IdleAfter = 0, time.Minute }, "need usage-interval > 0"},
		{"sampling off", func(c *Config) { c.UsageInterval = 0 }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.NodeName = "n"
			tc.give(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate() = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
