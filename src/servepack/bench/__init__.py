"""servepack.bench"""
