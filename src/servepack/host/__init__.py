"""servepack.host"""
