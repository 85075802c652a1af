"""A private CA and its certificates for the tests' TLS servers (trustme, the test extra).

:func:`make_pki` writes, in a folder, the CA (``ca.pem``) and one key and
certificate pair per case: ``good`` (for the names asked), ``other`` (for
``other.test`` only: a name mismatch), ``expired`` (for the names, but
expired a day ago).  Nothing here is trusted by the system: a client trusts
them only through ``ca.pem``.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import trustme


@dataclass
class Pki:
    """Paths: ``ca`` (PEM), and ``(cert, key)`` for each case."""

    ca: str
    good: tuple[str, str]
    other: tuple[str, str]
    expired: tuple[str, str]


def make_pki(folder: str, *names: str) -> Pki:
    """A CA and the good / other-name / expired certificates for ``names`` (see the module)."""
    os.makedirs(folder, exist_ok=True)
    ca = trustme.CA()
    ca_path = os.path.join(folder, "ca.pem")
    ca.cert_pem.write_to_path(ca_path)
    now = datetime.datetime.now(datetime.timezone.utc)
    leaves = {
        "good": ca.issue_cert(*names),
        "other": ca.issue_cert("other.test"),
        "expired": ca.issue_cert(*names, not_before=now - datetime.timedelta(days=30),
                                 not_after=now - datetime.timedelta(days=1)),
    }
    pairs = {}
    for case, leaf in leaves.items():
        cert, key = os.path.join(folder, f"{case}.crt"), os.path.join(folder, f"{case}.key")
        with open(cert, "wb") as f:
            for blob in leaf.cert_chain_pems:
                f.write(blob.bytes())
        leaf.private_key_pem.write_to_path(key)
        pairs[case] = (cert, key)
    return Pki(ca_path, pairs["good"], pairs["other"], pairs["expired"])
