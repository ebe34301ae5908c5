package org.deepx;

/** An interned op: its id (stable for the runtime's lifetime) and name. */
public record Op(int id, String name) {}
