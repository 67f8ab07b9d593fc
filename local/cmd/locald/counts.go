package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/ft288/locks/local"
)

// writeCounts writes the runner's counts (local.Counts) to path as one
// JSON object, atomically: to a temporary file in path's folder, then
// renamed, so a reader that sees path sees all of it.
func writeCounts(path string, c local.Counts) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".locald-counts-*")
	if err != nil {
		return fmt.Errorf("-counts %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("-counts %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("-counts %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("-counts %s: %w", path, err)
	}
	return nil
}

// dumpCounts writes the runner's counts to path (when set) and logs that
// it did, or why it could not.
func dumpCounts(log *slog.Logger, path string, runner *local.Runner) {
	if path == "" {
		return
	}
	if err := writeCounts(path, runner.Counts()); err != nil {
		log.Error("counts not written", "error", err)
		return
	}
	log.Info("counts written", "file", path)
}
