package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kvstrand/mocker/cluster"
)

// LoadConfig reads a cluster config from a file: the object a script gives
// mocker.cluster({...}), as JSON, or as YAML when the name ends in .yaml or
// .yml. It is read by cluster.ConfigFromMap, so a key or value the script
// would refuse is refused here with the same message, prefixed by the file.
func LoadConfig(path string) (cluster.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return cluster.Config{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := ParseConfig(data, isYAML(path))
	if err != nil {
		return cluster.Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

func isYAML(path string) bool {
	ext := strings.ToLower(filepath.Ext(path))
	return ext == ".yaml" || ext == ".yml"
}

// ParseConfig reads a cluster config from JSON, or from YAML when yamlDoc
// is set; an empty document is the zero config.
func ParseConfig(data []byte, yamlDoc bool) (cluster.Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return cluster.Config{}, nil
	}
	if yamlDoc {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return cluster.Config{}, fmt.Errorf("YAML: %w", err)
		}
		data = j
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // ConfigFromMap checks integers exactly
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return cluster.Config{}, fmt.Errorf("want one JSON object such as {\"engine\": \"vllm\", \"disagg\": true}: %w", err)
	}
	if dec.More() {
		return cluster.Config{}, fmt.Errorf("want one JSON object, found more after it")
	}
	if m == nil {
		return cluster.Config{}, nil
	}
	return cluster.ConfigFromMap(m)
}
