package nodes

import (
	"encoding/json"
	"testing"

	"github.com/gpuaas/gpuaas/client/nodeapi"
)

// FuzzInventory feeds arbitrary agent messages through what the server does
// with a join request or heartbeat before touching the database: decode,
// bound, encode and digest. Nothing may panic, and an accepted inventory
// must digest the same twice.
func FuzzInventory(f *testing.F) {
	f.Add([]byte(`{"join_token":"gpjt_x","name":"h","public_key_pem":"","inventory":{"hostname":"h","gpus":[{"index":0,"uuid":"GPU-1","model":"NVIDIA H100 80GB HBM3","memory_mib":81559}]}}`))
	f.Add([]byte(`{"inventory":{"gpus":[{"uuid":""},{"uuid":"a"},{"uuid":"a"}]},"workloads":[{"container_id":"c","name":"n","state":"running"}]}`))
	f.Add([]byte(`{"inventory":{"cpu_cores":-1,"gpus":null}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var jr nodeapi.JoinRequest
		if json.Unmarshal(b, &jr) == nil {
			_, _ = parsePublicKey(jr.PublicKeyPEM)
			if len(checkInventory("/inventory", jr.Inventory)) == 0 {
				if _, d1, err := encodeInventory(jr.Inventory); err == nil && d1 != InventoryDigest(jr.Inventory) {
					t.Fatal("digest is not stable")
				}
			}
		}
		var hb nodeapi.Heartbeat
		if json.Unmarshal(b, &hb) == nil && hb.Inventory != nil {
			_ = checkInventory("/inventory", *hb.Inventory)
		}
	})
}
