#!/usr/bin/env python3
"""Server-to-server signatures for Nimbus (and CloudKit), made with Python's `cryptography`:
an implementation independent of the server's, which its tests use, and a way to call Nimbus
from a shell (docs/keys.md).

  scripts/s2s-sign.py genkey DIR
      writes DIR/private.pem and DIR/public.pem (P-256); register public.pem with
      `nimbus keys add --container C --environment E --public-key DIR/public.pem`
  scripts/s2s-sign.py headers --key DIR/private.pem --key-id ID PATH [BODY-FILE]
      prints curl -H options that sign a request to PATH (from /database/..., query included
      when the URL has one) with the body in BODY-FILE (none: an empty body)
  scripts/s2s-sign.py sign --key DIR/private.pem < requests.json
      signs a JSON array of {"date", "body", "path"} (body text; "emptyHash": true signs an
      empty body's hash as the empty string, as MistKit does) and prints a JSON array of
      base64 DER signatures
"""
import base64
import datetime
import hashlib
import json
import os
import sys

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec


def message(date, body, path, empty_hash=False):
    """date:base64(sha256(body)):path, the text CloudKit's scheme signs."""
    digest = "" if empty_hash and not body else base64.b64encode(hashlib.sha256(body).digest()).decode()
    return f"{date}:{digest}:{path}".encode()


def load_key(path):
    with open(path, "rb") as handle:
        return serialization.load_pem_private_key(handle.read(), password=None)


def sign(key, text):
    return base64.b64encode(key.sign(text, ec.ECDSA(hashes.SHA256()))).decode()


def main(argv):
    if len(argv) == 3 and argv[1] == "genkey":
        key = ec.generate_private_key(ec.SECP256R1())
        os.makedirs(argv[2], exist_ok=True)
        with open(os.path.join(argv[2], "private.pem"), "wb") as handle:
            handle.write(key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        with open(os.path.join(argv[2], "public.pem"), "wb") as handle:
            handle.write(key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        return 0
    if len(argv) == 4 and argv[1] == "sign" and argv[2] == "--key":
        key = load_key(argv[3])
        requests = json.load(sys.stdin)
        print(json.dumps([
            sign(key, message(r["date"], r["body"].encode(), r["path"], r.get("emptyHash", False)))
            for r in requests]))
        return 0
    if len(argv) in (7, 8) and argv[1] == "headers" and argv[2] == "--key" and argv[4] == "--key-id":
        key = load_key(argv[3])
        body = b""
        if len(argv) == 8:
            with open(argv[7], "rb") as handle:
                body = handle.read()
        date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        signature = sign(key, message(date, body, argv[6]))
        print(f"-H 'X-Apple-CloudKit-Request-KeyID: {argv[5]}' "
              f"-H 'X-Apple-CloudKit-Request-ISO8601Date: {date}' "
              f"-H 'X-Apple-CloudKit-Request-SignatureV1: {signature}'")
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
