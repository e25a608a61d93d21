// Package testtls makes throw-away TLS material for tests: a CA, a server
// certificate for 127.0.0.1 and localhost, and a client certificate, all
// generated with crypto/x509 when a test asks, so that no key is ever
// committed. Nothing but tests may import it.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// Files are the paths of one generated set of PEM files.
type Files struct {
	// CACert is the CA certificate that signed both certificates below.
	CACert string
	// ServerCert and ServerKey are valid for 127.0.0.1, ::1 and localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate for mutual TLS.
	ClientCert, ClientKey string
	// OtherCACert is a CA that signed neither: a client or server that
	// trusts it must refuse the certificates above.
	OtherCACert string
	// Pool holds CACert.
	Pool *x509.CertPool
}

// Write generates a CA, a server and a client certificate into dir and
// returns their paths. It fails t on any error.
func Write(t testing.TB, dir string) Files {
	t.Helper()
	f, err := write(dir)
	if err != nil {
		t.Fatalf("testtls: generating test certificates in %s: %v", dir, err)
	}
	return f
}

func write(dir string) (Files, error) {
	f := Files{
		CACert: filepath.Join(dir, "ca.pem"), OtherCACert: filepath.Join(dir, "other-ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	caKey, caCert, err := newCA("nomad-statefulset test CA")
	if err != nil {
		return f, err
	}
	if err := writePEM(f.CACert, "CERTIFICATE", caCert.Raw); err != nil {
		return f, err
	}
	_, other, err := newCA("an unrelated CA")
	if err != nil {
		return f, err
	}
	if err := writePEM(f.OtherCACert, "CERTIFICATE", other.Raw); err != nil {
		return f, err
	}
	server := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "nomad-statefulset test server"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := leaf(server, caCert, caKey, f.ServerCert, f.ServerKey); err != nil {
		return f, err
	}
	client := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "nomad-statefulset test client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := leaf(client, caCert, caKey, f.ClientCert, f.ClientKey); err != nil {
		return f, err
	}
	f.Pool = x509.NewCertPool()
	f.Pool.AddCert(caCert)
	return f, nil
}

// ServerTLS returns a server config presenting the server certificate.
func (f Files) ServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(f.ServerCert, f.ServerKey)
	if err != nil {
		t.Fatalf("testtls: loading the server certificate: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// serial numbers the certificates of one test binary.
var serial atomic.Int64

func template(subject pkix.Name) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: subject,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
	}
}

func newCA(name string) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating a CA key: %w", err)
	}
	tmpl := template(pkix.Name{CommonName: name})
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	return key, cert, nil
}

// leaf signs a certificate shaped like shape with the CA and writes it and
// its key.
func leaf(shape, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating a key: %w", err)
	}
	tmpl := template(shape.Subject)
	tmpl.DNSNames, tmpl.IPAddresses, tmpl.ExtKeyUsage = shape.DNSNames, shape.IPAddresses, shape.ExtKeyUsage
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("signing %s: %w", shape.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding the key of %s: %w", shape.Subject.CommonName, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(keyPath, "PRIVATE KEY", keyDER)
}

func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
