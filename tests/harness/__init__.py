"""Real test infrastructure: the nspawn SSH fleet, the kube-apiserver, the SMTP sink."""
