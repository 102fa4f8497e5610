"""Laneway: a durable workflow engine on PostgreSQL, served as a GraphQL API."""
