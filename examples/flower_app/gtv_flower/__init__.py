"""FedAvg/FedProx on a gtvmodel networked dataset with certified server-side evaluation."""
