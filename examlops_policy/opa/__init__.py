"""The Open Policy Agent this layer talks to: transport, bundles, the local server."""
