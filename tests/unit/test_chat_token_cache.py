"""The verified-token cache the chat turn relies on for speed (services.common.auth.Authenticator)
must never outlive a token's `exp` nor accept a token it did not verify."""

from __future__ import annotations

import time

import pytest

from services.common.auth import Authenticator, mint_token
from services.common.errors import Unauthenticated
from services.common.settings import CommonSettings

SECRET = "cache-test-secret-0123456789abcdef0123456789"


def test_cached_token_expires_with_its_exp(tmp_path):
    auth = Authenticator(CommonSettings(jwt_secret=SECRET, jwt_leeway_s=0, data_dir=tmp_path))
    tok = mint_token(SECRET, "alice", ttl_s=1)
    assert auth.authenticate(f"Bearer {tok}").sub == "alice"
    assert auth.authenticate(f"Bearer {tok}").sub == "alice"  # from the cache
    time.sleep(1.2)
    with pytest.raises(Unauthenticated):
        auth.authenticate(f"Bearer {tok}")


def test_tampered_token_not_served_from_cache(tmp_path):
    auth = Authenticator(CommonSettings(jwt_secret=SECRET, data_dir=tmp_path))
    tok = mint_token(SECRET, "alice")
    auth.authenticate(f"Bearer {tok}")
    head, payload, sig = tok.split(".")
    with pytest.raises(Unauthenticated):
        flipped = ("B" if sig[0] == "A" else "A") + sig[1:]  # first char: all 6 bits are signature bits
        auth.authenticate(f"Bearer {head}.{payload}.{flipped}")
    with pytest.raises(Unauthenticated):
        auth.authenticate(f"Bearer {mint_token('another-secret-0123456789abcdef0123', 'alice')}")
