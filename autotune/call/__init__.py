"""call"""
