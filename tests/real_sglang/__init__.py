"""Tests against a real SGLang 0.5.23 on CPU (``make test-real``)."""
