package plane

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/kvstrand/mocker/engine"
)

// Discovery keys. Every key of a worker is written under its lease, so
// they all go when the lease does (revoked on a clean shutdown, expired
// 10 s after the worker stops keeping it alive).
//
// Dynamo's (lib/runtime/src/discovery/kv_store.rs), so a Dynamo user's
// `etcdctl get --prefix v1/` reads what they expect:
//
//	v1/instances/{ns}/{component}/generate/{instance:x}   Endpoint
//	v1/mdc/{ns}/{component}/generate/{instance:x}         Model (card_json)
//
// with component "prefill" for prefill workers and "backend" for decode
// and aggregated ones, as Dynamo's mocker registers them. Ours, the one
// the router watches, with everything it needs to use the worker:
//
//	v1/mocker/{ns}/{instance:x}                           Registration
//
// A router keeps a key of its own under its lease, which workers watch: a
// router that ends without saying goodbye (killed, or cut off from etcd
// past its lease) has its key expire, and every worker then withdraws the
// requests of that router's sessions.
//
//	v1/mocker-routers/{ns}/{router:x}                     RouterRegistration
const (
	LeaseTTLSeconds = 10
	endpointName    = "generate"
)

func ComponentOf(role engine.WorkerType) string {
	if role == engine.WorkerPrefill {
		return "prefill"
	}
	return "backend"
}

func InstanceKey(ns string, role engine.WorkerType, id int64) string {
	return fmt.Sprintf("v1/instances/%s/%s/%s/%x", ns, ComponentOf(role), endpointName, id)
}

func MDCKey(ns string, role engine.WorkerType, id int64) string {
	return fmt.Sprintf("%s%x", MDCPrefix(ns, role), id)
}

// MDCPrefix selects the model cards of role's component in ns: for
// WorkerPrefill, the prefills' and no one else's (decode and aggregated
// workers share the "backend" component).
func MDCPrefix(ns string, role engine.WorkerType) string {
	return fmt.Sprintf("v1/mdc/%s/%s/%s/", ns, ComponentOf(role), endpointName)
}

func RegistrationPrefix(ns string) string { return "v1/mocker/" + ns + "/" }

func RegistrationKey(ns string, id int64) string {
	return fmt.Sprintf("%s%x", RegistrationPrefix(ns), id)
}

func RouterPrefix(ns string) string { return "v1/mocker-routers/" + ns + "/" }

func RouterKey(ns string, id int64) string {
	return fmt.Sprintf("%s%x", RouterPrefix(ns), id)
}

// RouterRegistration is a router's record under
// v1/mocker-routers/{ns}/{router:x}, for whoever lists a namespace's
// routers; workers only watch for the key's end.
type RouterRegistration struct {
	// RouterID is the router's lease id; its sessions' hello carries it.
	RouterID int64  `json:"router_id"`
	Host     string `json:"host"`
	PID      int    `json:"pid"`
	// StartedUnixNano is when the router registered.
	StartedUnixNano int64 `json:"started_unix_nano"`
	// PlaneKey is the public half of the router's X25519 key pair
	// (base64): a worker derives its sessions' MAC keys from it (seal.go).
	PlaneKey string `json:"plane_key"`
}

// InstanceOfKey reads the instance id from a key's hex tail.
func InstanceOfKey(key string) (int64, error) {
	i := strings.LastIndexByte(key, '/')
	id, err := strconv.ParseUint(key[i+1:], 16, 64)
	return int64(id), err
}

func CmdSubject(ns string, id int64) string { return fmt.Sprintf("mocker.%s.%x.cmd", ns, id) }
func OutSubject(ns string, id int64) string { return fmt.Sprintf("mocker.%s.%x.out", ns, id) }
func OutWildcard(ns string) string          { return fmt.Sprintf("mocker.%s.*.out", ns) }

// Registration is a worker's record under v1/mocker/{ns}/{instance:x}:
// what a router needs to route to it and to read its frames.
type Registration struct {
	// InstanceID is the worker's lease id, as Dynamo's instance ids are.
	InstanceID int64 `json:"instance_id"`
	// Name is unique among a namespace's live workers ("prefill-0").
	Name      string            `json:"name"`
	Role      engine.WorkerType `json:"role"`
	Engine    string            `json:"engine"`
	Namespace string            `json:"namespace"`
	// Args are the worker's engine arguments after defaults.
	Args json.RawMessage `json:"args"`
	// EpochUnixNano is the wall instant of the worker's modeled time 0:
	// its modeled ms = (wall − epoch) in ms × speedup_ratio.
	EpochUnixNano int64 `json:"epoch_unix_nano"`
	// CmdSubject and OutSubject are its request plane (ours).
	CmdSubject string `json:"cmd_subject"`
	OutSubject string `json:"out_subject"`
	// TransferAddr is a prefill's transfer server, host:port on the
	// advertised host.
	TransferAddr string `json:"transfer_addr,omitempty"`
	PID          int    `json:"pid"`
	// PlaneKey is the public half of the worker's X25519 key pair
	// (base64): a router derives its session's MAC key from it (seal.go).
	PlaneKey string `json:"plane_key"`
}

// EndpointValue is Dynamo's Endpoint discovery value.
func EndpointValue(ns string, role engine.WorkerType, id int64) ([]byte, error) {
	return json.Marshal(map[string]any{
		"type": "Endpoint", "namespace": ns, "component": ComponentOf(role), "endpoint": endpointName,
		"instance_id": id, "transport": map[string]any{"nats_tcp": CmdSubject(ns, id)},
	})
}

// ModelEntry is Dynamo's Model discovery value: the card of a worker's
// model, filed under its instance. ModelValue writes it and a decode
// reads a prefill's (its transfer address). Each struct's fields are in
// the order of their JSON names, the order encoding/json sorts a map's
// keys in, which is how these bytes were first written: Dynamo's tools
// read them, so that order is kept.
type ModelEntry struct {
	Card       ModelCard `json:"card_json"`
	Component  string    `json:"component"`
	Endpoint   string    `json:"endpoint"`
	InstanceID int64     `json:"instance_id"`
	Namespace  string    `json:"namespace"`
	Type       string    `json:"type"` // "Model"
}

// ModelCard is a model card: what a router learns of a worker's model
// and KV cache.
type ModelCard struct {
	DisplayName      string            `json:"display_name"`
	KVCacheBlockSize int               `json:"kv_cache_block_size"`
	ModelType        string            `json:"model_type"`
	RuntimeConfig    RuntimeConfig     `json:"runtime_config"`
	WorkerType       engine.WorkerType `json:"worker_type"`
}

// RuntimeConfig is a card's runtime_config: the KV pool and the limits a
// router reads, and a prefill's disaggregated endpoint.
type RuntimeConfig struct {
	DataParallelSize      int                    `json:"data_parallel_size"`
	DataParallelStartRank int                    `json:"data_parallel_start_rank"`
	DisaggregatedEndpoint *DisaggregatedEndpoint `json:"disaggregated_endpoint,omitempty"`
	EnableLocalIndexer    bool                   `json:"enable_local_indexer"`
	MaxNumBatchedTokens   *int                   `json:"max_num_batched_tokens,omitempty"`
	MaxNumSeqs            *int                   `json:"max_num_seqs,omitempty"`
	TotalKVBlocks         int                    `json:"total_kv_blocks"`
}

// DisaggregatedEndpoint is where a prefill's transfer server listens.
type DisaggregatedEndpoint struct {
	Host string `json:"bootstrap_host"`
	Port int    `json:"bootstrap_port"`
}

// ModelValue is Dynamo's Model discovery value (ModelEntry), its card
// carrying the runtime_config a router reads; bootstrapPort 0: no
// disaggregated endpoint.
func ModelValue(ns string, role engine.WorkerType, id int64, a engine.Args, bootstrapHost string, bootstrapPort int) ([]byte, error) {
	rc := RuntimeConfig{
		TotalKVBlocks: a.NumGPUBlocks, DataParallelSize: max(a.DPSize, 1), EnableLocalIndexer: true,
		MaxNumSeqs: a.MaxNumSeqs, MaxNumBatchedTokens: a.MaxNumBatchedTokens,
	}
	if bootstrapPort != 0 {
		rc.DisaggregatedEndpoint = &DisaggregatedEndpoint{Host: bootstrapHost, Port: bootstrapPort}
	}
	return json.Marshal(ModelEntry{
		Type: "Model", Namespace: ns, Component: ComponentOf(role), Endpoint: endpointName, InstanceID: id,
		Card: ModelCard{DisplayName: "mocker", KVCacheBlockSize: a.BlockSize, ModelType: "Chat", WorkerType: role, RuntimeConfig: rc},
	})
}
