// Command allocators: the two ways a cluster hands NICs to a pod, small but real, for the
// cluster tier (tests/cluster/test_allocators.py). Each runs beside one node's kubelet.
//
//	allocators deviceplugin -kubelet-dir DIR -resource nvidia.com/hostdev -dev-dir DIR -devices 2
//	    A device plugin (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1): registers with the
//	    kubelet on DIR/device-plugins/kubelet.sock, lists DEVICES devices of RESOURCE, and
//	    allocates device i as the character device DEV-DIR/uverbs<i> at /dev/infiniband/uverbs<i>.
//	allocators dra -kubelet-dir DIR -node NODE -kubeconfig KC -driver NAME -dev-dir DIR -cdi-dir DIR -devices 2
//	    A DRA kubelet plugin (k8s.io/dynamic-resource-allocation/kubeletplugin): publishes a
//	    ResourceSlice of DEVICES devices for NODE, and prepares a claim's devices as CDI devices
//	    (a spec in CDI-DIR, which the node's containerd reads) giving the same device nodes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const containerDir = "/dev/infiniband"

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05.000")+" "+format+"\n", args...)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: allocators deviceplugin|dra [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch os.Args[1] {
	case "deviceplugin":
		err = devicePlugin(ctx, os.Args[2:])
	case "dra":
		err = draPlugin(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		say("error: %v", err)
		os.Exit(1)
	}
}

// ------------------------------------------------------------------ device plugin

type hostdev struct {
	pluginapi.UnimplementedDevicePluginServer
	resource string
	devDir   string
	devices  int
}

func (p *hostdev) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *hostdev) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for i := 0; i < p.devices; i++ {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: fmt.Sprintf("hostdev%d", i), Health: pluginapi.Healthy})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	say("ListAndWatch: %d devices of %s", p.devices, p.resource)
	<-stream.Context().Done()
	return nil
}

func (p *hostdev) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		cr := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		for _, id := range c.DevicesIds {
			var i int
			if _, err := fmt.Sscanf(id, "hostdev%d", &i); err != nil || i < 0 || i >= p.devices {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{
				ContainerPath: fmt.Sprintf("%s/uverbs%d", containerDir, i),
				HostPath:      filepath.Join(p.devDir, fmt.Sprintf("uverbs%d", i)),
				Permissions:   "rw",
			})
		}
		cr.Envs["HOSTNET_RDMA_TEST_HOSTDEV"] = strings.Join(c.DevicesIds, ",")
		say("Allocate: %v", c.DevicesIds)
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

func (p *hostdev) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *hostdev) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func devicePlugin(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("deviceplugin", flag.ExitOnError)
	kubeletDir := fs.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory")
	resource := fs.String("resource", "nvidia.com/hostdev", "the extended resource advertised")
	devDir := fs.String("dev-dir", "", "the host directory holding uverbs<i>")
	devices := fs.Int("devices", 2, "how many devices")
	_ = fs.Parse(args)
	dir := filepath.Join(*kubeletDir, "device-plugins")
	endpoint := "hostnet-rdma-test-hostdev.sock"
	sock := filepath.Join(dir, endpoint)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &hostdev{resource: *resource, devDir: *devDir, devices: *devices})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// Register with the kubelet (retried: the kubelet may not have made its socket yet).
	kubeletSock := filepath.Join(dir, "kubelet.sock")
	deadline := time.Now().Add(60 * time.Second)
	for {
		err = register(ctx, kubeletSock, endpoint, *resource)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("register with %s: %w", kubeletSock, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	say("registered %s at %s", *resource, sock)
	<-ctx.Done()
	return nil
}

func register(ctx context.Context, kubeletSock, endpoint, resource string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(cctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
		Options: &pluginapi.DevicePluginOptions{},
	})
	return err
}

// ------------------------------------------------------------------ DRA kubelet plugin

type nics struct {
	driver string
	pool   string
}

func (n *nics) cdiKind() string { return n.driver + "/nic" }

func (n *nics) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		var r kubeletplugin.PrepareResult
		if claim.Status.Allocation == nil {
			r.Err = fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
			out[claim.UID] = r
			continue
		}
		for _, res := range claim.Status.Allocation.Devices.Results {
			if res.Driver != n.driver {
				continue
			}
			r.Devices = append(r.Devices, kubeletplugin.Device{
				Requests: []string{res.Request}, PoolName: res.Pool, DeviceName: res.Device,
				CDIDeviceIDs: []string{n.cdiKind() + "=" + res.Device},
			})
			say("Prepare %s/%s: %s/%s", claim.Namespace, claim.Name, res.Pool, res.Device)
		}
		out[claim.UID] = r
	}
	return out, nil
}

func (n *nics) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (n *nics) HandleError(_ context.Context, err error, msg string) { say("%s: %v", msg, err) }

// writeCDISpec: one CDI spec (https://github.com/cncf-tags/container-device-interface,
// SPEC.md) naming each device's node and an env var.
func (n *nics) writeCDISpec(cdiDir, devDir string, devices int) error {
	type node struct {
		Path        string `json:"path"`
		HostPath    string `json:"hostPath"`
		Permissions string `json:"permissions"`
	}
	type edits struct {
		Env         []string `json:"env"`
		DeviceNodes []node   `json:"deviceNodes"`
	}
	type device struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	}
	spec := struct {
		CDIVersion string   `json:"cdiVersion"`
		Kind       string   `json:"kind"`
		Devices    []device `json:"devices"`
	}{CDIVersion: "0.6.0", Kind: n.cdiKind()}
	for i := 0; i < devices; i++ {
		spec.Devices = append(spec.Devices, device{
			Name: fmt.Sprintf("nic%d", i),
			ContainerEdits: edits{
				Env: []string{fmt.Sprintf("HOSTNET_RDMA_TEST_DRA=nic%d", i)},
				DeviceNodes: []node{{Path: fmt.Sprintf("%s/uverbs%d", containerDir, i),
					HostPath: filepath.Join(devDir, fmt.Sprintf("uverbs%d", i)), Permissions: "rw"}},
			},
		})
	}
	data, err := json.MarshalIndent(spec, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cdiDir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(cdiDir, ".hostnet-rdma-test.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(cdiDir, "hostnet-rdma-test.json"))
}

func draPlugin(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dra", flag.ExitOnError)
	kubeletDir := fs.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory")
	node := fs.String("node", "", "the node's name")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig to publish ResourceSlices with")
	driver := fs.String("driver", "nic.hostnet-rdma.test", "the DRA driver name")
	devDir := fs.String("dev-dir", "", "the host directory holding uverbs<i>")
	cdiDir := fs.String("cdi-dir", "/var/run/cdi", "the directory the node's containerd reads CDI specs from")
	devices := fs.Int("devices", 2, "how many devices")
	_ = fs.Parse(args)
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	n := &nics{driver: *driver, pool: *node}
	if err := n.writeCDISpec(*cdiDir, *devDir, *devices); err != nil {
		return err
	}
	dataDir := filepath.Join(*kubeletDir, "plugins", *driver)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return err
	}
	registry := filepath.Join(*kubeletDir, "plugins_registry")
	if err := os.MkdirAll(registry, 0o750); err != nil {
		return err
	}
	helper, err := kubeletplugin.Start(ctx, n,
		kubeletplugin.KubeClient(client), kubeletplugin.NodeName(*node), kubeletplugin.DriverName(*driver),
		kubeletplugin.RegistrarDirectoryPath(registry), kubeletplugin.PluginDataDirectoryPath(dataDir))
	if err != nil {
		return err
	}
	defer helper.Stop()
	var devs []resourceapi.Device
	for i := 0; i < *devices; i++ {
		devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("nic%d", i)})
	}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{*node: {Slices: []resourceslice.Slice{{Devices: devs}}}},
	}); err != nil {
		return err
	}
	say("DRA driver %s on %s: %d devices published", *driver, *node, *devices)
	<-ctx.Done()
	return nil
}
