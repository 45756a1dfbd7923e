// gowebhook is the compiled baseline: a minimal mutating webhook in Go (net/http + TLS)
// doing the same static injection (dns policy, /dev/infiniband and /dev/shm volumes and
// mounts, capabilities, NCCL env) with no launcher logic. -floor answers a fixed
// "allowed" response without reading the body: the cost of TLS + HTTP alone.
package main

import (
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
)

type review struct {
	Request struct {
		UID    string `json:"uid"`
		Object struct {
			Spec struct {
				HostNetwork bool              `json:"hostNetwork"`
				Volumes     []json.RawMessage `json:"volumes"`
				Containers  []struct {
					Env          []json.RawMessage `json:"env"`
					VolumeMounts []json.RawMessage `json:"volumeMounts"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"object"`
	} `json:"request"`
}

type op struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	Value interface{} `json:"value,omitempty"`
}

// The built-in BM.GPU4.8 profile, all nine keys (the same static env the webhook injects).
var ncclEnv = [][2]string{
	{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "INIT,NET"},
	{"NCCL_IB_HCA", "=mlx5_0,mlx5_2,mlx5_6,mlx5_8,mlx5_10,mlx5_12,mlx5_14,mlx5_16,mlx5_1,mlx5_3,mlx5_7,mlx5_9,mlx5_11,mlx5_13,mlx5_15,mlx5_17"},
	{"NCCL_IB_GID_INDEX", "3"}, {"NCCL_IB_TC", "41"}, {"NCCL_IB_SL", "0"},
	{"NCCL_IB_TIMEOUT", "22"}, {"NCCL_IB_QPS_PER_CONNECTION", "4"}, {"NCCL_IB_SPLIT_DATA_ON_QPS", "0"},
}

func mutate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 7<<20))
	if err != nil {
		http.Error(w, "read", 400)
		return
	}
	var rv review
	if err := json.Unmarshal(body, &rv); err != nil || rv.Request.UID == "" {
		http.Error(w, "bad review", 400)
		return
	}
	spec := rv.Request.Object.Spec
	var ops []op
	if spec.HostNetwork {
		ops = append(ops, op{"add", "/spec/dnsPolicy", "ClusterFirstWithHostNet"})
		vols := []interface{}{
			map[string]interface{}{"name": "rdma-infiniband", "hostPath": map[string]string{"path": "/dev/infiniband"}},
			map[string]interface{}{"name": "rdma-shm", "emptyDir": map[string]string{"medium": "Memory", "sizeLimit": "32Gi"}},
		}
		if spec.Volumes == nil {
			ops = append(ops, op{"add", "/spec/volumes", vols})
		} else {
			for _, v := range vols {
				ops = append(ops, op{"add", "/spec/volumes/-", v})
			}
		}
		for i, c := range spec.Containers {
			p := "/spec/containers/" + strconv.Itoa(i)
			mounts := []interface{}{
				map[string]string{"name": "rdma-infiniband", "mountPath": "/dev/infiniband"},
				map[string]string{"name": "rdma-shm", "mountPath": "/dev/shm"},
			}
			if c.VolumeMounts == nil {
				ops = append(ops, op{"add", p + "/volumeMounts", mounts})
			} else {
				for _, m := range mounts {
					ops = append(ops, op{"add", p + "/volumeMounts/-", m})
				}
			}
			ops = append(ops, op{"add", p + "/securityContext", map[string]interface{}{
				"privileged": true, "capabilities": map[string][]string{"add": {"IPC_LOCK", "SYS_ADMIN"}}}})
			var env []interface{}
			for _, kv := range ncclEnv {
				env = append(env, map[string]string{"name": kv[0], "value": kv[1]})
			}
			if c.Env == nil {
				ops = append(ops, op{"add", p + "/env", env})
			} else {
				for _, e := range env {
					ops = append(ops, op{"add", p + "/env/-", e})
				}
			}
		}
	}
	resp := map[string]interface{}{"uid": rv.Request.UID, "allowed": true}
	if len(ops) > 0 {
		patch, _ := json.Marshal(ops)
		resp["patchType"] = "JSONPatch"
		resp["patch"] = base64.StdEncoding.EncodeToString(patch)
	}
	out, _ := json.Marshal(map[string]interface{}{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
	w.Header().Set("Content-Type", "application/json")
	w.Write(out)
}

var fixed = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"fixed","allowed":true}}`)

func floor(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Write(fixed)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9443", "listen address")
	cert := flag.String("cert", "", "tls.crt")
	key := flag.String("key", "", "tls.key")
	isFloor := flag.Bool("floor", false, "fixed response, no parsing")
	flag.Parse()
	h := http.HandlerFunc(mutate)
	if *isFloor {
		h = floor
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", h)
	// Clients closing idle keep-alive connections are not worth a log line each.
	srv := &http.Server{Addr: *addr, Handler: mux, ErrorLog: log.New(io.Discard, "", 0)}
	log.Fatal(srv.ListenAndServeTLS(*cert, *key))
}
