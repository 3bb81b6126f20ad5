"""The package's public names: every name in shoal.__all__ exists, and every
error class a failed call can raise is exported."""

import inspect

import shoal
from shoal import _errors


def test_every_exported_name_exists():
    missing = [n for n in shoal.__all__ if not hasattr(shoal, n)]
    assert not missing, missing


def test_every_error_class_is_exported():
    errors = [name for name, obj in inspect.getmembers(_errors, inspect.isclass)
              if issubclass(obj, _errors.Error) and not name.startswith("_")]
    assert "UnauthenticatedError" in errors
    unexported = sorted(set(errors) - set(shoal.__all__))
    assert not unexported, unexported
