#!/usr/bin/perl
# abi_normalize.pl BASELINE.abi CURRENT.abi > CURRENT.normalized.abi
#
# Takes back, in the abidw XML of the current build, the two changes a minor version may make
# that abidiff cannot tell from incompatible ones (docs/versioning.md), so that abidiff of the
# baseline against the result reports every other change:
#
# - fields appended to a growable struct (one whose first field is `struct_size`, except the
#   fixed dx_extension_t header): data members placed after the struct's last baseline member
#   are dropped and the struct gets its baseline size back. A field inserted, removed, moved or
#   retyped anywhere before that point still shows (an insertion moves the last baseline
#   member, which then reads as removed);
# - the "one past the largest" sentinels of append-only enums (`DX_STATUS_COUNT_`, any
#   enumerator named *_COUNT_): their baseline value is put back. Added enumerators need
#   nothing (abidiff counts them as harmless); removed or renumbered ones still show.
#
# abidiff's own suppressions cannot say this: in libabigail 2.2 a [suppress_type] with
# has_data_member_inserted_at = end also matches, by name alone, a change of that struct that
# keeps its size (a swapped or retyped field), and changed_enumerators also hides a deleted
# enumerator. Hence this step. abidw writes one element per line, which is what this reads.
use strict;
use warnings;

die "usage: $0 BASELINE.abi CURRENT.abi\n" unless @ARGV == 2;
my ($baseline_path, $current_path) = @ARGV;

# Structs whose first member is struct_size but whose layout is fixed (docs/versioning.md).
my %fixed = map { $_ => 1 } qw(dx_extension);

sub attr {
  my ($line, $name) = @_;
  return $line =~ /\s\Q$name\E='([^']*)'/ ? $1 : undef;
}

# Classifies one line: ('open', tag), ('close', tag) or ('leaf', tag); dies on anything else,
# so that an abidw that writes another layout fails loudly instead of normalizing nothing.
sub classify {
  my ($line, $where) = @_;
  return ('close', $1) if $line =~ m{^\s*</([\w-]+)>\s*$};
  return ('leaf', $1) if $line =~ m{^\s*<([\w-]+)(?:\s[^<>]*)?/>\s*$};
  return ('open', $1) if $line =~ m{^\s*<([\w-]+)(?:\s[^<>]*)?>\s*$};
  return ('leaf', '?xml') if $line =~ m{^\s*<\?xml};
  die "$where: unexpected line (not one XML element): $line";
}

# ---- read the baseline: growable structs and enum sentinels -------------------------------
my %growable;   # struct name -> { size => bits, last => offset of its last member }
my %sentinel;   # "enum name\0enumerator" -> baseline value
{
  open(my $in, '<', $baseline_path) or die "$baseline_path: $!\n";
  my @stack;    # open elements: { tag, name, members => [[offset, first var-decl name]] }
  my $enum;
  while (my $line = <$in>) {
    my ($kind, $tag) = classify($line, "$baseline_path:$.");
    if ($kind eq 'open') {
      my $e = { tag => $tag, name => attr($line, 'name'), line => $line, members => [] };
      if ($tag eq 'data-member' && @stack && $stack[-1]{tag} eq 'class-decl') {
        push @{ $stack[-1]{members} }, [attr($line, 'layout-offset-in-bits'), undef];
      }
      $enum = $e->{name} if $tag eq 'enum-decl';
      push @stack, $e;
    } elsif ($kind eq 'close') {
      my $e = pop @stack;
      if ($e->{tag} eq 'class-decl' && defined $e->{name} && @{ $e->{members} }
          && !exists $growable{ $e->{name} }) {
        my $m = $e->{members};
        if (($m->[0][1] // '') eq 'struct_size' && !$fixed{ $e->{name} }) {
          $growable{ $e->{name} } = { size => attr($e->{line}, 'size-in-bits'),
                                      last => $m->[-1][0] };
        }
      }
      undef $enum if $e->{tag} eq 'enum-decl';
    } else {
      if ($tag eq 'var-decl' && @stack >= 2 && $stack[-1]{tag} eq 'data-member'
          && $stack[-2]{tag} eq 'class-decl') {
        my $m = $stack[-2]{members}[-1];
        $m->[1] //= attr($line, 'name');
      }
      if ($tag eq 'enumerator' && defined $enum && attr($line, 'name') =~ /_COUNT_$/) {
        $sentinel{ $enum . "\0" . attr($line, 'name') } = attr($line, 'value');
      }
    }
  }
  close($in);
}

# ---- rewrite the current XML -----------------------------------------------------------------
open(my $in, '<', $current_path) or die "$current_path: $!\n";
my @stack;        # open elements: { tag, grow => growable entry or undef }
my $skip = 0;     # depth of the appended data member being dropped (0: none)
my $enum;
while (my $line = <$in>) {
  my ($kind, $tag) = classify($line, "$current_path:$.");
  if ($skip) {
    $skip++ if $kind eq 'open';
    $skip-- if $kind eq 'close';
    next;
  }
  if ($kind eq 'open') {
    my $grow;
    if ($tag eq 'class-decl') {
      my $name = attr($line, 'name');
      if (defined $name && $growable{$name}) {
        $grow = $growable{$name};
        $line =~ s/\ssize-in-bits='\d+'/ size-in-bits='$grow->{size}'/;
      }
    } elsif ($tag eq 'data-member' && @stack && $stack[-1]{grow}) {
      my $offset = attr($line, 'layout-offset-in-bits');
      if (defined $offset && $offset > $stack[-1]{grow}{last}) {
        $skip = 1;    # appended after the last baseline member: drop it
        next;
      }
    }
    $enum = attr($line, 'name') if $tag eq 'enum-decl';
    push @stack, { tag => $tag, grow => $grow };
  } elsif ($kind eq 'close') {
    my $e = pop @stack;
    undef $enum if $e && $e->{tag} eq 'enum-decl';
  } elsif ($tag eq 'enumerator' && defined $enum) {
    my $key = $enum . "\0" . (attr($line, 'name') // '');
    $line =~ s/\svalue='[^']*'/ value='$sentinel{$key}'/ if exists $sentinel{$key};
  }
  print $line;
}
close($in);
