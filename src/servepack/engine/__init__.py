"""servepack.engine"""
