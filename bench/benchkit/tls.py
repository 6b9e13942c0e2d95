"""A throwaway certificate authority for benchmarks behind TLS, as every real provider is."""

import os
import subprocess


def certificates(folder):
    """A throwaway authority and a certificate for 127.0.0.1 (and localhost) it signed, made
    with `openssl` in `folder`: paths of `ca.crt`, `server.crt` and `server.key`."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=switchyard-bench-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=localhost")
    with open(os.path.join(folder, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "server.crt", "-days", "2", "-extfile", "ext")
    return {name: os.path.join(folder, name) for name in ("ca.crt", "server.crt", "server.key")}
