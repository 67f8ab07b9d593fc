package chaos

import (
	"encoding/json"
	"fmt"
	"io"
)

// savedVersion is the format of a saved history; LoadHistory refuses
// another.
const savedVersion = 1

// saved is a history as SaveHistory writes it.
type saved struct {
	Version int
	History *History
}

// SaveHistory writes h as JSON, for Check to judge again later
// (LoadHistory): a run's history is the only way to see a rare
// violation again, since a run's timing is not the seed's.
func SaveHistory(w io.Writer, h *History) error {
	return json.NewEncoder(w).Encode(saved{Version: savedVersion, History: h})
}

// LoadHistory reads a history SaveHistory wrote. Its times keep their
// wall-clock readings only (JSON has no monotonic clock), which is what
// they are compared on.
func LoadHistory(r io.Reader) (*History, error) {
	var s saved
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return nil, err
	}
	if s.Version != savedVersion || s.History == nil {
		return nil, fmt.Errorf("not a saved chaos history of version %d", savedVersion)
	}
	return s.History, nil
}
