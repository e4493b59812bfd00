#!/usr/bin/env bash
# The lent GPU machine has no network and no tornado, which TVM's RPC tracker imports: build the
# git-ignored .rpcdeps/ (tornado unpacked from its abi3 wheel, the web, HTTP and test modules the
# tracker never imports dropped: ~0.5 MiB, beside .gpu/ under the 64 MiB a call may carry).
# tools/rpc_run.sh and tools/scaling_run.sh put it on PYTHONPATH; carry [".gpu", ".rpcdeps"].
#   bash tools/rpcdeps.sh      # here, with a package index (pip download), before the device call
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --no-deps tornado -d "$tmp"
rm -rf .rpcdeps && mkdir .rpcdeps
python3 -m zipfile -e "$tmp"/tornado-*.whl .rpcdeps
cd .rpcdeps/tornado
rm -rf test _locale_data platform/twisted.py platform/caresresolver.py web.py websocket.py auth.py template.py \
  testing.py simple_httpclient.py httpclient.py curl_httpclient.py http1connection.py httpserver.py wsgi.py \
  locale.py routing.py autoreload.py options.py ./*.pyi py.typed
cd ../..
PYTHONPATH=.rpcdeps python3 -c "import tornado.ioloop, tvm.rpc.tracker" && echo "rpcdeps: $(du -sk .rpcdeps | cut -f1) KiB in .rpcdeps/"
