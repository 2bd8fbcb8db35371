"""servepack.report"""
