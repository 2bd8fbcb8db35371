"""servepack.cli"""
