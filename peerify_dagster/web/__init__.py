"""The web app over the lake (`peerify serve`)."""
