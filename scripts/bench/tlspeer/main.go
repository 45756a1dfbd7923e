// tlspeer: one TLS handshake with Go's crypto/tls (the API server's TLS client), printing the
// certificate the server chose as JSON: its key type and serial. The server tier's rotation test
// uses it to see what the API server would see (OpenSSL clients offer other signature schemes).
package main

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "host:port to connect to")
	caFile := flag.String("ca", "", "PEM file of the CA to trust (as the webhook's caBundle)")
	serverName := flag.String("server-name", "", "name to verify (and send as SNI unless an IP); default: the host of -addr")
	flag.Parse()
	if err := run(*addr, *caFile, *serverName); err != nil {
		fmt.Fprintln(os.Stderr, "tlspeer:", err)
		os.Exit(1)
	}
}

func run(addr, caFile, serverName string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("no certificate in %s", caFile)
	}
	if serverName == "" {
		if serverName, _, err = net.SplitHostPort(addr); err != nil {
			return err
		}
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(dialer, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: serverName})
	if err != nil {
		return err
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	keyType := "unknown"
	switch leaf.PublicKey.(type) {
	case *ecdsa.PublicKey:
		keyType = "ECDSA"
	case *rsa.PublicKey:
		keyType = "RSA"
	case ed25519.PublicKey:
		keyType = "Ed25519"
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]string{
		"key_type": keyType,
		"serial":   leaf.SerialNumber.Text(16),
	})
}
