"""The process's default connection: a client (task mode) or a job (launch
mode), made on first use when the caller did not make one."""

import os
import threading

_lock = threading.Lock()
_client = None  # shoal.Client from connect()
_job = None  # shoal.Job from init()


def set_client(client):
    global _client
    with _lock:
        _client = client


def set_job(job):
    global _job
    with _lock:
        _job = job


def client():
    """The default Client, connecting to the node found the usual way."""
    if _client is None:
        from . import _client as client_module
        client_module.connect()
    return _client


def job():
    """The Job of this launched process (shoal.init() if not yet called)."""
    if _job is None:
        from . import _job as job_module
        job_module.init()
    return _job


def store_owner():
    """What put/get go through: the job under `shoal launch`, else a client."""
    if _job is not None:
        return _job._handle
    if _client is not None:
        return _client._handle
    if os.environ.get("SHOAL_KV_ENDPOINT"):
        return job()._handle
    return client()._handle
