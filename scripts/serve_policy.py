"""Serve a trained policy to a cell over openpi's websocket protocol, for clients of `openpi-client`.

Examples:
  python scripts/serve_policy.py --checkpoint assets/policies/real_only.pt
  python scripts/serve_policy.py --checkpoint outputs/train/wg_bg/policy.pt --host 0.0.0.0 --port 8000

On the cell's side (openpi-client 0.1.2), one episode:

  from openpi_client.websocket_client_policy import WebsocketClientPolicy
  client = WebsocketClientPolicy("127.0.0.1", 8000)
  meta = client.get_server_metadata()       # cameras, image_size, proprio (and tracking) the policy must be sent
  obs = {**cell_obs, "reset": True}         # the episode's first observation also resets the policy
  while not done:
      action = client.infer(obs)["actions"][0]   # (1, 27): one action per observation
      obs = step(action)

Each request is one control step's observation as the cell makes it: {"proprio": {...}, "images": {camera:
uint8 (H, W, 3)}}, plus "tracking" for a policy that reads the cell's tracking. The reply's "actions" is the
policy's action for it, an action chunk of one: the object-centric policy updates its tracker from every step's
observation. An observation that does not fit the checkpoint (a missing camera, a wrong image size, a missing
proprio entry) is refused with a message naming the field, its value and what was expected; the client raises it
as RuntimeError and may send a corrected one. The protocol in full: r2s2r.policy.server.

The checkpoint is loaded before the server listens: a file that is not a policy checkpoint exits with status 2.
Each connection gets its own copy of the policy. GET /healthz answers 200 (as openpi's server does). Stop with
Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from r2s2r import cli
from r2s2r.core import ConfigError


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="policy checkpoint (policy.pt of train.py, or assets/policies)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=cli.int_in(0, 65535), default=8000, help="port to listen on (0: any free port)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from r2s2r.policy.agent import load_agent
    from r2s2r.policy.server import PolicyServer

    try:
        agent = load_agent(args.checkpoint)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server = PolicyServer(agent, name=Path(args.checkpoint).name)

    def ready(port: int) -> None:
        print(f"serving {args.checkpoint} at ws://{args.host}:{port} (observes {server.spec['cameras']} at "
              f"{server.spec['image_size']})", flush=True)

    try:
        server.serve_forever(args.host, args.port, ready)
    except OSError as e:  # the address is taken or not this machine's
        print(f"error: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
